"""A range that runs backwards ('5-1', '23-2', 'fri-mon') is refused, naming its field, on
every way a beat is made. Celery's parser read it as wrapping past the end ('23-2': 23, 0,
1, 2), so such a beat ran at hours classic cron, and the five fields we document, refuse."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from heartbeats_app.cron import CronError, cron_parse
from heartbeats_app.defaults import DefaultsFileError, beats_sync
from heartbeats_app.models import Heartbeat
from qorven.agent.gateway import inbound_accept
from sessions_app.services.resolve import session_resolve

from ..factories.heartbeats_app import beat
from ..factories.tenancy import MembershipFactory, UserFactory
from ..fakes.model_server import reply, tool_call
from tenancy.models import Membership


@pytest.mark.parametrize("expression, field, written", [
    ("5-1 * * * *", "minute", "5-59,0-1"),
    ("0 23-2 * * *", "hour", "23,0-2"),
    ("0 9 28-3 * *", "day-of-month", "28-31,1-3"),
    ("0 9 1 nov-feb *", "month", "nov-dec,jan-feb"),
    ("0 9 * * fri-mon", "day-of-week", "fri-sat,sun-mon"),
    ("0 9 * * 6-1", "day-of-week", "6,0-1"),
    ("0 9 * * 1,5-2", "day-of-week", "5-6,0-2"),
    ("*/5 22-3/2 * * *", "hour", None),
])
def test_a_range_that_runs_backwards_is_refused_naming_its_field(expression, field, written):
    with pytest.raises(CronError) as raised:
        cron_parse(expression)
    message = str(raised.value)
    assert f"the {field} range" in message and "runs backwards" in message, message
    if written:
        assert f"'{written}'" in message, message


@pytest.mark.parametrize("expression", ["0 9 * * 5-7", "0 9 * * 0-6", "0 0-23 * * *", "0 9 * * mon-fri",
                                        "3-3 * * * *"])
def test_a_range_in_order_is_still_accepted(expression):
    cron_parse(expression)


def say(world, user, text, channel="telegram"):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=user)
    inbound_accept(session=session, content=text, channel=channel, sender_name=user.first_name, trust="paired",
                   user=user)


def tool_results(model_server, request_index):
    return [json.loads(m["content"]) for m in model_server.requests[request_index]["messages"] if m["role"] == "tool"]


@pytest.mark.django_db(transaction=True)
def test_the_beat_tools_get_the_reason_back_and_save_nothing(world, model_server, drain):
    night = beat(world.qor_a, name="night", cron="0 22 * * *", owner=world.alice)
    model_server.add(
        tool_call("set_beat", {"name": "pills", "cron": "0 23-2 * * *", "prompt": "pills"}),
        tool_call("update_beat", {"name": "night", "cron": "*/30 22-1 * * *"}),
        reply("Those hours run backwards."),
    )
    say(world, world.alice, "every night from 11 to 2, remind me of my pills")
    drain()
    created, updated = tool_results(model_server, 2)
    assert "the hour range 23-2 runs backwards" in created["error"], created
    assert "the hour range 22-1 runs backwards" in updated["error"], updated
    assert list(Heartbeat.objects.values_list("name", "cron")) == [("night", "0 22 * * *")]
    night.refresh_from_db()
    assert night.periodic_task.crontab.hour == "22"


@pytest.mark.django_db
def test_the_admin_form_shows_the_reason_on_the_cron_field(client, world):
    dana = UserFactory(username="dana", is_staff=True)
    MembershipFactory(tenant=world.tenant_a, user=dana, role=Membership.Role.ADMIN)
    client.force_login(dana)
    form = {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "name": "late", "cron": "5-1 * * * *",
            "timezone": "", "prompt": "p", "owner": dana.pk, "deliver_to": "", "deliver_channel": "",
            "enabled": "on", "runs-TOTAL_FORMS": "0", "runs-INITIAL_FORMS": "0", "runs-MIN_NUM_FORMS": "0",
            "runs-MAX_NUM_FORMS": "0"}
    response = client.post(reverse("admin:heartbeats_app_heartbeat_add"), form)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["cron"]
    assert "the minute range 5-1 runs backwards" in errors[0], errors
    assert not Heartbeat.objects.exists()


@pytest.mark.django_db
def test_the_defaults_file_reports_it_at_its_line_like_any_bad_cron(world, tmp_path, settings):
    path = tmp_path / "heartbeats.json"
    settings.QORVEN_HEARTBEATS_FILE = path
    path.write_text('{"beats": [\n  {"tenant": "acme", "name": "keep", "cron": "0 8 * * *", "prompt": "p"},\n'
                    '  {"tenant": "acme", "name": "late", "cron": "0 23-2 * * *", "prompt": "p"}\n]}\n')
    with pytest.raises(DefaultsFileError) as raised:
        beats_sync()
    (problem,) = raised.value.problems
    assert (problem.line, problem.field) == (3, "beats[1].cron")
    assert "the hour range 23-2 runs backwards" in problem.message
    assert not Heartbeat.objects.exists()  # as with any problem of the file: nothing changes


@pytest.mark.django_db
def test_a_beat_saved_with_one_before_keeps_running_and_moving_until_its_cron_is_changed(world):
    from heartbeats_app.errors import HeartbeatInvalid
    from heartbeats_app.selectors import heartbeat_next_run
    from heartbeats_app.services import heartbeat_update
    from tenancy.services import membership_timezone_set

    old = beat(world.qor_a, name="night", cron="0 22 * * *", owner=world.alice, timezone="")
    Heartbeat.objects.filter(pk=old.pk).update(cron="0 23-2 * * *")  # as saved before the check
    old.refresh_from_db()
    assert heartbeat_next_run(old) is not None
    membership_timezone_set(tenant=world.tenant_a, user=world.alice, timezone="Europe/Paris")  # re-mirrors it
    old = heartbeat_update(heartbeat=old, prompt="Still up?")
    assert (old.periodic_task.crontab.hour, str(old.periodic_task.crontab.timezone)) == ("23-2", "Europe/Paris")
    with pytest.raises(HeartbeatInvalid, match="the hour range 22-1 runs backwards"):
        heartbeat_update(heartbeat=old, cron="0 22-1 * * *")


@pytest.mark.django_db
def test_the_admin_saves_other_changes_of_such_a_beat_and_refuses_a_new_backward_range(client, world):
    from ..admin_forms import served_form

    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    old = beat(world.qor_a, name="night", cron="0 22 * * *", owner=world.alice)
    Heartbeat.objects.filter(pk=old.pk).update(cron="0 23-2 * * *")  # as saved before the check
    client.force_login(root)
    url = reverse("admin:heartbeats_app_heartbeat_change", args=[old.pk])
    form = served_form(client.get(url))
    assert client.post(url, {**form, "prompt": "Still up?"}).status_code == 302
    refused = client.post(url, {**form, "cron": "0 22-1 * * *"})
    assert refused.status_code == 200
    assert "the hour range 22-1 runs backwards" in refused.context["adminform"].form.errors["cron"][0]
    old.refresh_from_db()
    assert (old.cron, old.prompt) == ("0 23-2 * * *", "Still up?")


@pytest.mark.django_db
def test_the_admin_saves_a_prompt_change_of_such_a_beat_stored_with_its_fields_spaced_apart(host, world):
    """Before, its own cron, spaced out as it was stored, came back from the form with one
    space between fields; the save took that for a new cron and refused its backwards
    range, on both tries: the beat could not be saved in the admin at all."""
    from ..admin_forms import served_form
    from heartbeats_app.selectors import heartbeat_next_run

    old = beat(world.qor_a, name="night", cron="0 22 * * *", owner=world.alice)
    Heartbeat.objects.filter(pk=old.pk).update(cron="0  22-2 * * *")  # as saved before the check
    zone = old.periodic_task.crontab.timezone
    old.refresh_from_db()
    runs_next = heartbeat_next_run(old)
    url = reverse("admin:heartbeats_app_heartbeat_change", args=[old.pk])
    form = served_form(host.get(url))
    assert form["cron"] == "0  22-2 * * *"

    response = host.post(url, {**form, "prompt": "Still up?"})

    assert response.status_code == 302, response.context["adminform"].form.errors
    old.refresh_from_db()
    assert (old.prompt, old.cron) == ("Still up?", "0 22-2 * * *")  # the same expression, spaced as now
    crontab = old.periodic_task.crontab
    assert (crontab.minute, crontab.hour, crontab.timezone) == ("0", "22-2", zone)
    assert heartbeat_next_run(old) == runs_next


@pytest.mark.django_db
@pytest.mark.parametrize("stored, given", [
    ("0  22-2 * * *", "0 22-2 * * *"),
    ("0 22-2 * * *", " 0 22-2\t*  * * "),
])
def test_the_service_takes_the_stored_cron_spaced_otherwise_for_the_same(world, stored, given):
    from heartbeats_app.errors import HeartbeatInvalid
    from heartbeats_app.services import heartbeat_update

    old = beat(world.qor_a, name="night", cron="0 22 * * *", owner=world.alice)
    Heartbeat.objects.filter(pk=old.pk).update(cron=stored)  # as saved before the check
    old.refresh_from_db()

    old = heartbeat_update(heartbeat=old, cron=given, prompt="Still up?")

    assert (old.prompt, old.cron, old.periodic_task.crontab.hour) == ("Still up?", "0 22-2 * * *", "22-2")
    with pytest.raises(HeartbeatInvalid, match="the hour range 21-2 runs backwards"):
        heartbeat_update(heartbeat=old, cron="0  21-2 * * *")  # really changed: checked as any new cron
