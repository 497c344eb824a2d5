"""The admin for tenants and beats: a tenant admin sees and edits only their own tenant."""
from __future__ import annotations

import pytest
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from channels_app.models import ChannelBinding
from heartbeats_app.models import CLEAR_IMAGES, Heartbeat, HeartbeatRun
from heartbeats_app.services import heartbeat_create
from tenancy.models import Membership

from ..admin_forms import served_form
from ..factories.heartbeats_app import beat
from ..factories.tenancy import MembershipFactory, UserFactory
from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def dana(world):
    """Tenant admin of acme: staff, not a superuser, no Django model permissions."""
    user = UserFactory(username="dana", is_staff=True)
    MembershipFactory(tenant=world.tenant_a, user=user, role=Membership.Role.ADMIN)
    return user


@pytest.fixture
def beats(world):
    return {
        # A member's: dana, an admin but not an owner of acme, acts on no owner's beat.
        "acme": beat(world.qor_a, name="acme-brief", prompt="Acme's morning brief", owner=world.bob),
        "globex": beat(world.qor_b, name="globex-brief", prompt="Globex's secret plans", owner=world.charlie),
        "managed": heartbeat_create(tenant=world.tenant_a, qor=world.qor_a, name=CLEAR_IMAGES, cron="30 3 * * *",
                                    managed=True),
    }


def url(name, *args):
    return reverse(f"admin:{name}", args=args)


def test_a_tenant_admin_sees_only_their_tenants_beats(client, world, dana, beats):
    client.force_login(dana)
    listing = client.get(url("heartbeats_app_heartbeat_changelist"))
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "acme-brief" in page and CLEAR_IMAGES in page
    assert "globex-brief" not in page and "globex" not in page  # nor in the tenant filter

    foreign = client.get(url("heartbeats_app_heartbeat_change", beats["globex"].pk))
    assert foreign.status_code == 302 and foreign.url == url("index")  # as if it did not exist
    assert client.get(url("heartbeats_app_heartbeat_delete", beats["globex"].pk)).status_code == 302
    assert client.get(url("heartbeats_app_heartbeat_history", beats["globex"].pk)).status_code == 302
    own = client.get(url("heartbeats_app_heartbeat_change", beats["acme"].pk))
    assert own.status_code == 200 and "Acme&#x27;s morning brief" in own.content.decode()


def test_a_tenant_admin_cannot_touch_another_tenants_beat_by_posting(client, world, dana, beats):
    client.force_login(dana)
    response = client.post(url("heartbeats_app_heartbeat_changelist"), {
        "action": "disable", "_selected_action": [beats["globex"].pk, beats["acme"].pk],
    })
    assert response.status_code == 302
    assert Heartbeat.objects.get(pk=beats["globex"].pk).enabled
    assert not Heartbeat.objects.get(pk=beats["acme"].pk).enabled
    response = client.post(url("heartbeats_app_heartbeat_change", beats["globex"].pk),
                           {"name": "hijacked", "cron": "* * * * *", "prompt": "x", "enabled": "on"})
    assert response.status_code == 302
    assert Heartbeat.objects.get(pk=beats["globex"].pk).name == "globex-brief"


def test_the_add_form_offers_only_the_admins_tenants_qors_and_members(client, world, dana):
    client.force_login(dana)
    page = client.get(url("heartbeats_app_heartbeat_add")).content.decode()
    assert ">acme<" in page and ">globex<" not in page
    assert ">bob<" in page and ">charlie<" not in page
    assert ">alice<" not in page  # acme's owner: not dana's to give a beat to


def test_tenants_listing_and_editing_are_scoped_and_budget_is_for_the_host(client, world, dana):
    client.force_login(dana)
    page = client.get(url("qorven_tenant_changelist")).content.decode()
    assert "acme" in page and "globex" not in page
    assert client.get(url("qorven_tenant_change", world.tenant_b.pk)).status_code == 302
    assert client.get(url("qorven_tenant_add")).status_code == 403
    change = client.get(url("qorven_tenant_change", world.tenant_a.pk)).content.decode()
    assert 'name="monthly_token_budget"' not in change  # read-only for tenant admins
    assert 'name="name"' in change


def test_a_workspace_timezone_is_checked_when_saved(client, world, dana, beats):
    """A typo there would reach every beat without a zone of its own (a server error on
    save while acme has beats, then every run): it is refused at its field."""
    client.force_login(dana)
    change = client.get(url("qorven_tenant_change", world.tenant_a.pk))
    for typed in ("Europe/Pari", "localtime", "posix/Europe/Paris"):  # the last two: files, not zones
        response = client.post(url("qorven_tenant_change", world.tenant_a.pk),
                               {**served_form(change), "timezone": typed})
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["timezone"] == [
            f"unknown timezone {typed!r}; use an IANA name such as 'Europe/Paris' or 'UTC'"]
        world.tenant_a.refresh_from_db()
        assert world.tenant_a.timezone == "UTC"


def test_a_plain_member_or_non_staff_user_gets_no_admin(client, world, beats):
    bob = world.bob
    bob.is_staff = True
    bob.save()
    client.force_login(bob)  # a member of acme, not an admin of it
    assert client.get(url("heartbeats_app_heartbeat_changelist")).status_code == 403
    assert client.get(url("qorven_tenant_changelist")).status_code == 403


def test_a_superuser_sees_every_tenant(client, world, beats):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(root)
    page = client.get(url("heartbeats_app_heartbeat_changelist")).content.decode()
    assert "acme-brief" in page and "globex-brief" in page


def test_the_beat_list_shows_next_run_last_status_and_tokens(client, world, dana, beats):
    from datetime import datetime, timezone

    Heartbeat.objects.filter(pk=beats["acme"].pk).update(
        last_status="ok", tokens_spent=4321, last_run_at=datetime(2026, 3, 4, 8, 0, 5, tzinfo=timezone.utc))
    client.force_login(dana)
    page = client.get(url("heartbeats_app_heartbeat_changelist")).content.decode()
    for header in ("next run", "last run", "schedule"):
        assert header in page.lower()
    assert ">ok</span>" in page and "4,321 tokens" in page and "08:00" in page and "never" in page


def test_a_last_run_that_went_through_with_an_error_stands_out_in_the_beat_list(client, world, dana, beats):
    """An answer delivered cut off (or not delivered) is "ok" with an error: it showed as
    green as a clean run, its error only in a tooltip."""
    from datetime import datetime, timezone

    Heartbeat.objects.filter(pk=beats["acme"].pk).update(
        last_status="ok", last_error="cut off: the model's output limit ran out partway through its answer",
        last_run_at=datetime(2026, 3, 4, 8, 0, 5, tzinfo=timezone.utc))
    client.force_login(dana)
    page = client.get(url("heartbeats_app_heartbeat_changelist")).content.decode()
    assert 'title="cut off: the model&#x27;s output limit ran out partway through its answer">ok ⚠</span>' in page


def test_managed_beats_are_read_only_in_the_admin(client, world, dana, beats):
    client.force_login(dana)
    page = client.get(url("heartbeats_app_heartbeat_change", beats["managed"].pk)).content.decode()
    assert 'name="cron"' not in page and 'name="_save"' not in page
    assert client.get(url("heartbeats_app_heartbeat_delete", beats["managed"].pk)).status_code == 403
    client.post(url("heartbeats_app_heartbeat_changelist"), {"action": "disable",
                                                           "_selected_action": [beats["managed"].pk]})
    assert Heartbeat.objects.get(pk=beats["managed"].pk).enabled


def test_adding_and_editing_in_the_admin_keeps_the_periodic_task_in_step(client, world, dana):
    client.force_login(dana)
    form = {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "name": "evening", "cron": "61 * * * *",
            "timezone": "", "prompt": "Evening wrap-up", "owner": world.bob.pk, "deliver_to": world.bob.pk,
            "deliver_channel": "web", "enabled": "on",
            "runs-TOTAL_FORMS": "0", "runs-INITIAL_FORMS": "0", "runs-MIN_NUM_FORMS": "0", "runs-MAX_NUM_FORMS": "0"}
    bad = client.post(url("heartbeats_app_heartbeat_add"), form)
    assert bad.status_code == 200 and "minute" in bad.content.decode()
    assert not Heartbeat.objects.exists()

    response = client.post(url("heartbeats_app_heartbeat_add"), {**form, "cron": "0 19 * * *"})
    assert response.status_code == 302, response.content.decode()[:2000]
    hb = Heartbeat.objects.get(name="evening")
    assert PeriodicTask.objects.get(pk=hb.periodic_task_id).crontab.hour == "19"

    form.pop("tenant"), form.pop("qor")
    response = client.post(url("heartbeats_app_heartbeat_change", hb.pk), {**form, "cron": "0 20 * * *"})
    assert response.status_code == 302
    assert PeriodicTask.objects.get(pk=hb.periodic_task_id).crontab.hour == "20"


def test_the_admin_refuses_a_deactivated_delivery_target_saying_why(client, world, dana):
    world.bob.is_active = False
    world.bob.save(update_fields=["is_active"])
    client.force_login(dana)
    form = {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "name": "for-bob", "cron": "0 19 * * *",
            "timezone": "", "prompt": "Evening wrap-up", "owner": dana.pk, "deliver_to": world.bob.pk,
            "deliver_channel": "telegram", "enabled": "on",
            "runs-TOTAL_FORMS": "0", "runs-INITIAL_FORMS": "0", "runs-MIN_NUM_FORMS": "0", "runs-MAX_NUM_FORMS": "0"}
    response = client.post(url("heartbeats_app_heartbeat_add"), form)
    assert response.status_code == 200 and "bob is deactivated" in response.content.decode()
    assert not Heartbeat.objects.exists()


def test_the_admin_refuses_a_deactivated_owner_saying_why(client, world, dana):
    world.bob.is_active = False
    world.bob.save(update_fields=["is_active"])
    client.force_login(dana)
    form = {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "name": "bobs", "cron": "0 19 * * *",
            "timezone": "", "prompt": "Evening wrap-up", "owner": world.bob.pk, "deliver_to": dana.pk,
            "deliver_channel": "web", "enabled": "on",
            "runs-TOTAL_FORMS": "0", "runs-INITIAL_FORMS": "0", "runs-MIN_NUM_FORMS": "0", "runs-MAX_NUM_FORMS": "0"}
    response = client.post(url("heartbeats_app_heartbeat_add"), form)
    assert response.status_code == 200 and "bob is deactivated" in response.content.decode()
    assert not Heartbeat.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_run_now_runs_the_beat_and_records_it(client, world, dana, beats, model_server, drain):
    model_server.add(reply("Here is your brief."))
    client.force_login(dana)
    response = client.post(url("heartbeats_app_heartbeat_changelist"),
                           {"action": "run_now", "_selected_action": [beats["acme"].pk]})
    assert response.status_code == 302
    drain()
    run = HeartbeatRun.objects.get()
    assert (run.heartbeat_id, run.manual, run.status, run.output) == (beats["acme"].pk, True, "ok", "Here is your brief.")
    page = client.get(url("heartbeats_app_heartbeat_change", beats["acme"].pk)).content.decode()
    assert "Here is your brief." in page  # last output and the recent runs


def test_the_tenant_page_lists_bindings_with_credentials_masked(client, world, dana):
    ChannelBinding.objects.create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram", name="Aria bot",
                                  lookup_key="tg-lookup", credentials={"bot_token": "123:SUPERSECRET", "secret": "HOOKSECRET"})
    client.force_login(dana)
    page = client.get(url("qorven_tenant_change", world.tenant_a.pk)).content.decode()
    assert "Aria bot" in page and "2 set (hidden)" in page
    assert "SUPERSECRET" not in page and "HOOKSECRET" not in page
    assert ">alice<" in page or "alice" in page  # members inline


@pytest.mark.django_db(transaction=True)
def test_a_failed_runs_provider_words_are_the_hosts_and_the_tenant_admin_reads_our_notice(
    client, world, dana, beats, model_server, drain
):
    """A model failure's own text can carry a key fragment or the host's address: the run
    and the beat keep it for the host; a tenant admin reads our notice of what failed."""
    from ..fakes.model_server import error

    model_server.default = error(401, "Incorrect API key provided: sk-proj-Ab12**wxyz (model host 10.0.0.5)")
    client.force_login(dana)
    response = client.post(url("heartbeats_app_heartbeat_changelist"),
                           {"action": "run_now", "_selected_action": [beats["acme"].pk]})
    assert response.status_code == 302
    drain()
    assert HeartbeatRun.objects.get().status == "failed"
    change, changelist = url("heartbeats_app_heartbeat_change", beats["acme"].pk), url("heartbeats_app_heartbeat_changelist")
    for page in (client.get(change).content.decode(), client.get(changelist).content.decode()):
        assert "sk-proj" not in page and "10.0.0.5" not in page
    assert "settings need fixing" in client.get(change).content.decode()  # what failed, in our words

    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    assert "sk-proj-Ab12**wxyz" in client.get(change).content.decode()  # the host's to read



def test_a_name_taken_in_the_admin_names_whose_beat_has_it(client, world):
    """A superuser renaming Bob's beat to a name Bob already uses, or giving a workspace
    beat (no owner) to Bob, was told "you already have a beat named …": they have none."""
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    ours = beat(world.qor_a, name="news", owner=None, timezone="UTC")
    beat(world.qor_a, name="news", owner=world.bob)
    his = beat(world.qor_a, name="brief", owner=world.bob)
    client.force_login(root)
    for mine, change, says in (
        (his, {"name": "news"}, "bob already has a beat named 'news'; pick another name"),
        (ours, {"deliver_to": world.bob.pk, "deliver_channel": "web"},
         "bob already has a beat named 'news' and would see this one too; pick another name"),
    ):
        page = client.get(url("heartbeats_app_heartbeat_change", mine.pk))
        response = client.post(url("heartbeats_app_heartbeat_change", mine.pk), {**served_form(page), **change})
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["name"] == [says]


@pytest.mark.parametrize("field", ["owner", "deliver_to"])
def test_another_tenants_person_posted_by_id_is_refused_as_owner_or_recipient(client, host, world, dana, beats,
                                                                              field):
    """Charlie is globex's alone: neither acme's admin nor the host can make him the
    owner or recipient of an acme beat by posting his id, on its page or the add page."""
    mine = beats["acme"]
    extra = {"deliver_channel": "web"} if field == "deliver_to" else {}
    for admin_client, who in ((host, "host"), (None, "dana")):
        if admin_client is None:
            client.force_login(dana)
            admin_client = client
        page = admin_client.get(url("heartbeats_app_heartbeat_change", mine.pk))
        response = admin_client.post(url("heartbeats_app_heartbeat_change", mine.pk),
                                     {**served_form(page), field: world.charlie.pk, **extra})
        assert response.status_code == 200, who
        assert field in response.context["adminform"].form.errors, who
        added = admin_client.post(url("heartbeats_app_heartbeat_add"), {
            "tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "name": "spy", "cron": "0 9 * * *",
            "prompt": "x", "enabled": "on", field: world.charlie.pk, **extra})
        assert added.status_code == 200 and field in added.context["adminform"].form.errors, who
    mine.refresh_from_db()
    assert getattr(mine, f"{field}_id") != world.charlie.pk
    assert not Heartbeat.objects.filter(name="spy").exists()
