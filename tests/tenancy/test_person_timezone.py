"""Each person has their own timezone (the workspace's until they set one with `/timezone`):
the dates they are shown, the due times they give, the current time the Qor reads and
their own heartbeats' schedules follow it; someone else's setting never moves theirs."""
from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django_celery_beat.models import PeriodicTask

from memory_app.models import Memory
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from heartbeats_app.selectors import heartbeat_next_run
from tenancy.models import Membership, Tenant
from tenancy.trust import Trust

from ..factories.heartbeats_app import beat
from ..fakes.model_server import reply, tool_call

pytestmark = pytest.mark.django_db(transaction=True)


def say(world, user, text, *, channel="telegram", trust=Trust.PAIRED, group=False):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=None if group else user,
                              thread_id="-100777" if group else "", group=group)
    inbound_accept(session=session, content=text, channel=channel, sender_name=user.first_name, trust=trust,
                   user=user)
    return session


def last_answer(session) -> str:
    return Message.objects.filter(session=session, role="assistant").order_by("-seq").first().content


def zone_of(world, user) -> str:
    return Membership.objects.get(tenant=world.tenant_a, user=user).timezone


def tool_results(model_server) -> list[dict]:
    return [json.loads(m["content"]) for m in model_server.requests[-1]["messages"] if m["role"] == "tool"]


def test_timezone_shows_the_workspaces_until_the_person_sets_their_own(world, model_server, drain):
    session = say(world, world.alice, "/timezone")
    drain()
    assert "UTC" in last_answer(session) and "workspace" in last_answer(session)

    say(world, world.alice, "/timezone Europe/Paris")
    drain()
    assert last_answer(session).startswith("Your timezone is now Europe/Paris")
    assert zone_of(world, world.alice) == "Europe/Paris"
    assert zone_of(world, world.bob) == ""  # only hers

    say(world, world.alice, "/timezone Mars/Olympus")
    drain()
    assert "Mars/Olympus" in last_answer(session) and "IANA" in last_answer(session)
    assert zone_of(world, world.alice) == "Europe/Paris"  # a bad name changes nothing

    say(world, world.alice, "/timezone workspace")
    drain()
    assert "workspace" in last_answer(session)
    assert zone_of(world, world.alice) == ""
    assert model_server.requests == []


def test_timezone_is_set_only_by_the_paired_person_in_a_direct_chat(world, model_server, drain):
    group = say(world, world.alice, "/timezone Asia/Tokyo", group=True)
    drain()
    assert "direct chat" in last_answer(group)
    unpaired = say(world, world.bob, "/timezone Asia/Tokyo", trust=Trust.PUBLIC)
    drain()
    assert "paired" in last_answer(unpaired)
    assert zone_of(world, world.alice) == zone_of(world, world.bob) == ""


def test_history_dates_are_in_the_persons_timezone(world, model_server, drain):
    membership = Membership.objects.get(tenant=world.tenant_a, user=world.alice)
    membership.timezone = "Asia/Tokyo"
    membership.save(update_fields=["timezone"])
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    stored = message_append(session=session, role="user", content="the boiler is broken", channel="telegram",
                            sender_name="Alice", notify=False)
    Message.objects.filter(pk=stored.message.pk).update(created_at=datetime(2031, 3, 14, 23, 30, tzinfo=UTC))
    say(world, world.alice, "/history 5")
    drain()
    assert "03-15 08:30 Alice: the boiler is broken" in last_answer(session)  # Tokyo is UTC+9


def test_the_memories_in_a_prompt_are_dated_in_the_persons_timezone(world, model_server, drain):
    """Read with the turn's message (qorven.agent.turns): hers for Alice, who set one; the
    workspace's for Bob, who did not."""
    from ..factories.memory_app import remember

    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).update(timezone="Asia/Tokyo")
    Tenant.objects.filter(pk=world.tenant_a.pk).update(timezone="America/New_York")
    late = datetime(2031, 3, 14, 23, 30, tzinfo=UTC)  # the 15th in Tokyo, the 14th in New York
    for user in (world.alice, world.bob):
        remember(world.tenant_a, world.qor_a, user, "the boiler is a Vaillant", period_start=late, period_end=late)
    model_server.add(reply("A Vaillant."), reply("A Vaillant."))
    for user in (world.alice, world.bob):
        say(world, user, "what boiler do I have?")
        drain()
    alice, bob = ("\n".join(str(m["content"]) for m in request["messages"]) for request in model_server.requests)
    assert "15 Mar 2031 — the boiler is a Vaillant" in alice
    assert "14 Mar 2031 — the boiler is a Vaillant" in bob


def test_a_reminders_due_time_and_the_current_time_are_read_in_the_persons_timezone(world, model_server, drain):
    world.tenant_a.timezone = "Europe/Paris"
    world.tenant_a.save(update_fields=["timezone"])
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).update(timezone="America/New_York")
    model_server.add(
        tool_call("remember", {"content": "Call the plumber", "type": "reminder", "due": "2031-03-14T15:30"}),
        tool_call("current_time", {}),
        reply("Noted."),
    )
    say(world, world.alice, "remind me to call the plumber")
    drain()
    due, now = tool_results(model_server)
    assert due["due"] == "2031-03-14T15:30-04:00"
    assert Memory.objects.get(user=world.alice).period_start == datetime(2031, 3, 14, 19, 30, tzinfo=UTC)
    assert now["timezone"] == "America/New_York"
    assert now["iso"].endswith(("-05:00", "-04:00"))


def test_a_persons_own_beats_follow_their_timezone_and_move_with_it(world, model_server, drain):
    world.tenant_a.timezone = "Europe/Paris"
    world.tenant_a.save(update_fields=["timezone"])
    hers = beat(world.qor_a, name="morning", owner=world.alice, deliver_to=world.alice, deliver_channel="telegram")
    pinned = beat(world.qor_a, name="tokyo", owner=world.alice, timezone="Asia/Tokyo")
    bobs = beat(world.qor_a, name="bobs", owner=world.bob)
    workspace = beat(world.qor_a, name="shared")

    def crontab_zone(heartbeat) -> str:
        return str(PeriodicTask.objects.get(pk=heartbeat.periodic_task_id).crontab.timezone)

    assert crontab_zone(hers) == "Europe/Paris"
    session = say(world, world.alice, "/timezone America/New_York")
    drain()
    assert "1 of your heartbeats" in last_answer(session)
    assert crontab_zone(hers) == "America/New_York"
    assert crontab_zone(pinned) == "Asia/Tokyo"  # a beat with its own timezone keeps it
    assert crontab_zone(bobs) == crontab_zone(workspace) == "Europe/Paris"

    say(world, world.alice, "/beats")
    drain()
    assert "America/New_York" in last_answer(session)

    say(world, world.alice, "/timezone workspace")
    drain()
    assert crontab_zone(hers) == "Europe/Paris"


def test_a_name_too_long_for_any_zone_is_refused_like_an_unknown_one(world, model_server, drain):
    session = say(world, world.alice, "/timezone Europe/" + "x" * 300)
    drain()
    assert last_answer(session).startswith("I don't know the timezone 'Europe/xxx")
    assert zone_of(world, world.alice) == ""


def test_a_zone_saved_before_such_names_were_refused_still_reads_and_only_new_names_are_checked(
        world, model_server, drain):
    """'localtime' (this server's own clock) and 'Factory' passed once: a workspace or a
    person with one of them saved is read as before, and neither can be chosen again."""
    Tenant.objects.filter(pk=world.tenant_a.pk).update(timezone="localtime")
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).update(timezone="Factory")
    world.tenant_a.refresh_from_db()
    hers = beat(world.qor_a, name="morning", owner=world.alice)
    bobs = beat(world.qor_a, name="evening", owner=world.bob)
    assert heartbeat_next_run(hers) is not None and heartbeat_next_run(bobs) is not None

    alice = say(world, world.alice, "/timezone")
    bob = say(world, world.bob, "/timezone", channel="web")
    drain()
    assert last_answer(alice).startswith("Your timezone is Factory (it is ")
    assert last_answer(bob).startswith("You follow the workspace's timezone, localtime (it is ")

    say(world, world.alice, "/timezone localtime")
    drain()
    assert last_answer(alice).startswith("I don't know the timezone 'localtime'")
    assert zone_of(world, world.alice) == "Factory"
    assert model_server.requests == []


def test_a_beat_changed_while_its_owner_changes_timezone_runs_in_the_new_one(world):
    """The person's timezone changes (their beats moved with it) while one of their beats is
    being changed (the model's update_beat): whichever commits last, the beat's schedule is
    in the zone the person has now, never the one they left."""
    import threading
    import time

    from django.db import connection, connections, transaction

    from heartbeats_app.services import heartbeat_update
    from tenancy.services import membership_timezone_set

    if connection.vendor != "postgresql":
        pytest.skip("two writers at once: SQLite takes one write at a time")
    hers = beat(world.qor_a, name="morning", owner=world.alice)
    changed, commit, errors = threading.Event(), threading.Event(), []

    def retime() -> None:
        try:
            with transaction.atomic():
                membership_timezone_set(tenant=world.tenant_a, user=world.alice, timezone="Asia/Tokyo")
                changed.set()
                commit.wait(10)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def edit() -> None:
        try:
            heartbeat_update(heartbeat=hers, cron="30 7 * * *")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    first = threading.Thread(target=retime)
    first.start()
    assert changed.wait(10)
    second = threading.Thread(target=edit)
    second.start()
    time.sleep(0.5)  # the edit is under way, waiting for what the timezone change holds
    commit.set()
    first.join(10)
    second.join(10)
    assert errors == []
    task = PeriodicTask.objects.select_related("crontab").get(pk=hers.periodic_task_id)
    assert (task.crontab.minute, task.crontab.hour) == ("30", "7")
    assert str(task.crontab.timezone) == "Asia/Tokyo"


def test_a_person_let_back_into_the_workspace_has_their_beats_in_the_zone_they_now_follow(host, world):
    """Alice set Tokyo for herself, left the workspace (her membership and its timezone went)
    and is let back in by the host: her beats run in the workspace's zone again, as /beats
    and each run read it, not at Tokyo's hour."""
    from django.urls import reverse

    world.tenant_a.timezone = "Europe/Paris"
    world.tenant_a.save(update_fields=["timezone"])
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).update(role="member")
    hers = beat(world.qor_a, name="morning", owner=world.alice)
    say(world, world.alice, "/timezone Asia/Tokyo")
    assert str(PeriodicTask.objects.get(pk=hers.periodic_task_id).crontab.timezone) == "Asia/Tokyo"
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()

    added = host.post(reverse("admin:qorven_membership_add"),
                      {"tenant": world.tenant_a.pk, "user": world.alice.pk, "role": "member", "timezone": ""})

    assert added.status_code == 302
    assert zone_of(world, world.alice) == ""
    assert str(PeriodicTask.objects.get(pk=hers.periodic_task_id).crontab.timezone) == "Europe/Paris"
