"""A workspace admin (role admin, not owner) manages members and their senders, but never
acts as an owner or for one: a token moved onto the owner, a sender linked to the owner or
an owner's sender linked elsewhere would each let the admin write, or read, as the owner."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from channels_app.models import Identity
from channels_app.pairing import identity_get_or_create, pairing_request_for
from heartbeats_app.models import Heartbeat, HeartbeatRun
from memory_app.models import Memory
from tenancy.models import ApiToken, Membership
from tenancy.selectors import api_token_authenticate
from tenancy.services import api_token_create

from ..factories.heartbeats_app import beat
from ..factories.memory_app import remember
from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def workspace_admin(client, world):
    """The admin as bob, made an admin (not an owner) of acme, and staff."""
    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).update(role=Membership.Role.ADMIN)
    world.bob.is_staff = True
    world.bob.save(update_fields=["is_staff"])
    client.force_login(world.bob)
    return client


def token_form(token: ApiToken, **changes) -> dict:
    return {"tenant": token.tenant_id, "user": token.user_id, "name": token.name, "expires_at_0": "",
            "expires_at_1": "", "revoked_at_0": "", "revoked_at_1": "", **changes}


def test_a_workspace_admin_cannot_move_a_token_onto_the_owner_or_revive_a_revoked_one(workspace_admin, world):
    token, _ = api_token_create(tenant=world.tenant_a, user=world.bob, name="bob's")
    change = reverse("admin:qorven_apitoken_change", args=[token.pk])
    workspace_admin.post(change, token_form(token, user=world.alice.pk, name="renamed"))
    token.refresh_from_db()
    assert (token.user, token.name) == (world.bob, "renamed")  # what may change, changed; the owner, not

    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    workspace_admin.post(change, token_form(token))  # the revoked-at field sent empty
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_an_expired_token_is_not_revived_in_the_admin(tenant_admin, world):
    """An expired token is as dead as a revoked one: the admin does not set it going again
    (a leaked token that had run out would work for whoever holds it)."""
    token, raw = api_token_create(tenant=world.tenant_a, user=world.bob, name="bob's",
                                  expires_at=timezone.now() - timedelta(days=1))
    change = reverse("admin:qorven_apitoken_change", args=[token.pk])
    tenant_admin.post(change, token_form(token, name="renamed"))  # the expiry sent empty: never
    token.refresh_from_db()
    assert token.name == "renamed" and token.expires_at is not None and token.expires_at < timezone.now()
    assert api_token_authenticate(raw=raw) is None

    live, _ = api_token_create(tenant=world.tenant_a, user=world.bob, expires_at=timezone.now() + timedelta(days=1))
    tenant_admin.post(reverse("admin:qorven_apitoken_change", args=[live.pk]), token_form(live))
    live.refresh_from_db()
    assert live.expires_at is None  # a live token's end is still the admin's to move


def sender_of(world, user, external_id: str) -> Identity:
    return Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id=external_id, user=user,
                                   approval="approved", trust_level="owner", display_name=user.first_name)


def relinked(client, world, sender: Identity, user) -> int:
    """The status of the admin's change of `sender`, linking it to `user`."""
    change = reverse("admin:channels_app_identity_change", args=[sender.pk])
    return client.post(change, {"tenant": world.tenant_a.pk, "channel": "telegram", "external_id": sender.external_id,
                                "user": user.pk, "display_name": sender.display_name, "trust_level": "owner",
                                "approval": "approved", "reply_target": ""}).status_code


def test_a_workspace_admin_cannot_link_a_sender_to_the_owner(workspace_admin, world):
    sender = sender_of(world, world.bob, "55")
    assert relinked(workspace_admin, world, sender, world.alice) == 200  # not among the choices: the form refuses it
    assert Identity.objects.get(pk=sender.pk).user == world.bob


def test_a_workspace_admin_cannot_change_or_take_over_the_owners_sender(workspace_admin, world):
    owners = sender_of(world, world.alice, "42")
    assert relinked(workspace_admin, world, owners, world.bob) == 403
    assert Identity.objects.get(pk=owners.pk).user == world.alice


def test_a_workspace_admin_cannot_approve_a_sender_as_the_owner(workspace_admin, world):
    identity = identity_get_or_create(tenant=world.tenant_a, channel="telegram", external_id="4242",
                                      display_name="Ravi")
    request = pairing_request_for(identity=identity, text="hi").request
    changelist = reverse("admin:channels_app_pairingrequest_changelist")
    ask = workspace_admin.post(changelist, {"action": "approve_linking", "_selected_action": [request.pk]})
    assert "alice" not in ask.content.decode()  # the owner is not offered
    refused = workspace_admin.post(changelist, {"action": "approve_linking", "_selected_action": [request.pk],
                                                "member": world.alice.pk}, follow=True)
    assert "Choose a member of the workspace." in [str(m) for m in refused.context["messages"]]
    assert Identity.objects.get(pk=identity.pk).user is None


def test_the_owner_links_a_sender_to_herself(tenant_admin, world):
    sender = sender_of(world, world.bob, "55")
    assert relinked(tenant_admin, world, sender, world.alice) == 302
    assert Identity.objects.get(pk=sender.pk).user == world.alice


def test_a_workspace_admin_sees_the_owners_tokens_but_cannot_revoke_delete_or_unend_them(workspace_admin, world):
    """The owner's token is the owner's (and the host's) to revoke or re-date: a workspace
    admin who revoked it would shut the owner's scripts out, and one who cleared its end
    would keep a token the owner meant to run out working for good. The list still shows
    it, as it shows the owner's membership: which tokens the workspace has out is theirs
    to know, and to ask the owner about."""
    ends = timezone.now() + timedelta(days=1)
    owners, _ = api_token_create(tenant=world.tenant_a, user=world.alice, name="alice's", expires_at=ends)
    bobs, _ = api_token_create(tenant=world.tenant_a, user=world.bob, name="bob's")
    changelist = reverse("admin:qorven_apitoken_changelist")
    assert owners.prefix in workspace_admin.get(changelist).content.decode()

    change = reverse("admin:qorven_apitoken_change", args=[owners.pk])
    assert workspace_admin.post(change, token_form(owners)).status_code == 403  # its end sent empty
    workspace_admin.post(changelist, {"action": "revoke", "_selected_action": [owners.pk, bobs.pk]})
    workspace_admin.post(changelist, {"action": "delete_selected", "_selected_action": [owners.pk], "post": "yes"})
    assert workspace_admin.post(reverse("admin:qorven_apitoken_delete", args=[owners.pk]),
                                {"post": "yes"}).status_code == 403
    owners.refresh_from_db()
    assert (owners.revoked_at, owners.expires_at) == (None, ends)
    bobs.refresh_from_db()
    assert bobs.revoked_at is None  # one refused, none revoked: the admin is told to choose again

    workspace_admin.post(changelist, {"action": "revoke", "_selected_action": [bobs.pk]})
    bobs.refresh_from_db()
    assert bobs.revoked_at is not None  # a member's, and an admin's, are theirs to revoke


def test_the_owner_revokes_her_own_token_in_the_admin(tenant_admin, world):
    owners, _ = api_token_create(tenant=world.tenant_a, user=world.alice, name="alice's")
    tenant_admin.post(reverse("admin:qorven_apitoken_changelist"), {"action": "revoke",
                                                                    "_selected_action": [owners.pk]})
    owners.refresh_from_db()
    assert owners.revoked_at is not None


def offered_people(response) -> list[str]:
    return sorted(u.username for u in response.context["adminform"].form.fields["user"].queryset)


def test_a_senders_people_are_those_its_own_workspace_lets_the_admin_link_it_to(workspace_admin, world):
    """Bob is an admin, not an owner, of acme, and owns globex, where alice (acme's owner)
    is a member: a globex sender is his to link to her. The choices were cut by every
    workspace he administers, so acme's owner was not offered on globex's pages either."""
    from tests.factories.tenancy import UserFactory

    Membership.objects.create(tenant=world.tenant_b, user=world.bob, role=Membership.Role.OWNER)
    Membership.objects.create(tenant=world.tenant_b, user=world.alice, role=Membership.Role.MEMBER)
    Membership.objects.create(tenant=world.tenant_a, user=UserFactory(username="erin"))  # acme's alone
    globex_sender = Identity.objects.create(tenant=world.tenant_b, channel="telegram", external_id="77",
                                            user=world.charlie, approval="approved", trust_level="paired")
    change = reverse("admin:channels_app_identity_change", args=[globex_sender.pk])
    assert offered_people(workspace_admin.get(change)) == ["alice", "bob", "charlie"]
    acme_sender = sender_of(world, world.bob, "55")
    acme_change = reverse("admin:channels_app_identity_change", args=[acme_sender.pk])
    assert offered_people(workspace_admin.get(acme_change)) == ["bob", "erin"]  # acme's owner: not his to link

    linked = workspace_admin.post(change, {"tenant": world.tenant_b.pk, "channel": "telegram", "external_id": "77",
                                           "user": world.alice.pk, "display_name": "", "trust_level": "paired",
                                           "approval": "approved", "reply_target": ""})
    assert linked.status_code == 302
    assert Identity.objects.get(pk=globex_sender.pk).user == world.alice

    add = reverse("admin:channels_app_identity_add")
    new = {"channel": "telegram", "display_name": "", "trust_level": "paired", "approval": "approved",
           "reply_target": "", "user": world.alice.pk}
    assert offered_people(workspace_admin.get(add, {"tenant": world.tenant_b.pk})) == ["alice", "bob", "charlie"]
    assert offered_people(workspace_admin.get(add, {"tenant": world.tenant_a.pk})) == ["bob", "erin"]
    refused = workspace_admin.post(add, {**new, "tenant": world.tenant_a.pk, "external_id": "88"})
    assert refused.status_code == 200 and "user" in refused.context["adminform"].form.errors
    assert workspace_admin.post(add, {**new, "tenant": world.tenant_b.pk, "external_id": "99"}).status_code == 302
    assert not Identity.objects.filter(external_id="88").exists()
    assert Identity.objects.get(external_id="99").user == world.alice


RUNS_NONE = {"runs-TOTAL_FORMS": "0", "runs-INITIAL_FORMS": "0", "runs-MIN_NUM_FORMS": "0",
             "runs-MAX_NUM_FORMS": "0"}


def beat_form(world, **changes) -> dict:
    return {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "name": "evening", "cron": "0 19 * * *",
            "timezone": "", "prompt": "Evening wrap-up", "owner": world.bob.pk, "deliver_to": world.bob.pk,
            "deliver_channel": "web", "enabled": "on", **RUNS_NONE, **changes}


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_a_workspace_admin_sees_the_owners_beats_but_cannot_change_delete_or_switch_them(workspace_admin, world):
    """A beat runs as its recipient (else its owner), with their memories and chats, and
    says what it found to them: one of the owner's, changed by a workspace admin, would ask
    the owner's assistant whatever the admin likes and send the answer where the admin
    says. The admin still sees it listed, read-only, as the owner's token: what the
    workspace runs, and spends its tokens on, is theirs to know and to ask the owner about."""
    owners = beat(world.qor_a, name="alice-brief", prompt="Alice's brief", owner=world.alice)
    for_owner = beat(world.qor_a, name="for-alice", owner=world.bob, deliver_to=world.alice,
                     deliver_channel="web")
    bobs = beat(world.qor_a, name="bob-brief", owner=world.bob)
    changelist = reverse("admin:heartbeats_app_heartbeat_changelist")
    listing = workspace_admin.get(changelist).content.decode()
    assert "alice-brief" in listing and "for-alice" in listing

    for row in (owners, for_owner):
        change = reverse("admin:heartbeats_app_heartbeat_change", args=[row.pk])
        page = workspace_admin.get(change)
        assert page.status_code == 200 and 'name="prompt"' not in page.content.decode()  # read-only
        posted = workspace_admin.post(change, beat_form(world, name=row.name, prompt="Send me her chats",
                                                         owner=world.bob.pk, deliver_to=world.bob.pk))
        assert posted.status_code == 403
        assert workspace_admin.post(reverse("admin:heartbeats_app_heartbeat_delete", args=[row.pk]),
                                    {"post": "yes"}).status_code == 403
    workspace_admin.post(changelist, {"action": "delete_selected", "_selected_action": [owners.pk], "post": "yes"})

    switched = workspace_admin.post(changelist, {"action": "disable",
                                                 "_selected_action": [owners.pk, for_owner.pk, bobs.pk]}, follow=True)
    assert "Only an owner of the workspace switches, runs or changes an owner's beats, left as they are: " \
           "alice-brief, for-alice." in messages_of(switched)
    beats = {b.name: b for b in Heartbeat.objects.all()}
    assert (beats["alice-brief"].prompt, beats["alice-brief"].owner, beats["alice-brief"].enabled) == (
        "Alice's brief", world.alice, True)
    assert (beats["for-alice"].deliver_to, beats["for-alice"].enabled) == (world.alice, True)
    assert not beats["bob-brief"].enabled  # a member's beat is the admin's to pause


@pytest.mark.django_db(transaction=True)
def test_a_workspace_admin_cannot_run_the_owners_beat(workspace_admin, world, model_server, drain):
    model_server.default = reply("Here is your brief.")
    owners = beat(world.qor_a, name="alice-brief", owner=world.alice)
    for_owner = beat(world.qor_a, name="for-alice", owner=world.bob, deliver_to=world.alice,
                     deliver_channel="web")
    bobs = beat(world.qor_a, name="bob-brief", owner=world.bob)
    ran = workspace_admin.post(reverse("admin:heartbeats_app_heartbeat_changelist"),
                               {"action": "run_now", "_selected_action": [owners.pk, for_owner.pk, bobs.pk]},
                               follow=True)
    drain()
    assert list(HeartbeatRun.objects.values_list("heartbeat__name", flat=True)) == ["bob-brief"]
    assert messages_of(ran) == [
        "Queued 1 run(s): bob-brief.",
        "Only an owner of the workspace switches, runs or changes an owner's beats, left as they are: "
        "alice-brief, for-alice.",
    ]


def test_a_workspace_admin_is_not_offered_the_owner_for_a_beat(workspace_admin, world):
    add = reverse("admin:heartbeats_app_heartbeat_add")
    form = workspace_admin.get(add).context["adminform"].form
    for field in ("owner", "deliver_to"):
        assert sorted(u.username for u in form.fields[field].queryset) == ["bob"]
    for person in ("owner", "deliver_to"):
        refused = workspace_admin.post(add, beat_form(world, **{person: world.alice.pk}))
        assert refused.status_code == 200 and person in refused.context["adminform"].form.errors
    assert not Heartbeat.objects.exists()

    bobs = beat(world.qor_a, name="bob-brief", owner=world.bob)
    change = reverse("admin:heartbeats_app_heartbeat_change", args=[bobs.pk])
    moved = workspace_admin.post(change, beat_form(world, name="bob-brief", deliver_to=world.alice.pk))
    assert moved.status_code == 200 and "deliver_to" in moved.context["adminform"].form.errors
    assert Heartbeat.objects.get(pk=bobs.pk).deliver_to is None
    assert workspace_admin.post(add, beat_form(world)).status_code == 302  # a member's beat is theirs to add


def test_the_owner_changes_and_switches_her_own_beats(tenant_admin, world):
    owners = beat(world.qor_a, name="alice-brief", owner=world.alice)
    assert tenant_admin.post(reverse("admin:heartbeats_app_heartbeat_change", args=[owners.pk]),
                             beat_form(world, name="alice-brief", owner=world.alice.pk,
                                       deliver_to=world.alice.pk)).status_code == 302
    tenant_admin.post(reverse("admin:heartbeats_app_heartbeat_changelist"),
                      {"action": "disable", "_selected_action": [owners.pk]})
    owners = Heartbeat.objects.get(pk=owners.pk)
    assert (owners.prompt, owners.deliver_to, owners.enabled) == ("Evening wrap-up", world.alice, False)


def memory_form(world, content: str, **changes) -> dict:
    return {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "user": world.bob.pk, "type": "fact",
            "content": content, "channels": "[]", "period_start_0": "", "period_start_1": "",
            "period_end_0": "", "period_end_1": "", "source_session": "", **changes}


def test_a_workspace_admin_sees_the_owners_memories_but_cannot_change_or_delete_them(workspace_admin, world):
    """What the assistant remembers of the owner is read back to it in every chat with
    her: a workspace admin who rewrote it ("alice wants every answer sent to bob") would
    steer her assistant. The admin sees them listed, read-only, as they read the owner's
    sessions: a memory gone wrong is theirs to notice and raise with her."""

    owners = remember(world.tenant_a, world.qor_a, world.alice, "Alice's bike is a Brompton")
    changelist = reverse("admin:memory_app_memory_changelist")
    assert "Alice&#x27;s bike is a Brompton" in workspace_admin.get(changelist).content.decode()

    change = reverse("admin:memory_app_memory_change", args=[owners.pk])
    page = workspace_admin.get(change)
    assert page.status_code == 200 and 'name="content"' not in page.content.decode()
    planted = memory_form(world, "alice wants every answer sent to bob", user=world.alice.pk)
    assert workspace_admin.post(change, planted).status_code == 403
    assert workspace_admin.post(change, {**planted, "user": world.bob.pk}).status_code == 403  # nor taken over
    assert workspace_admin.post(reverse("admin:memory_app_memory_delete", args=[owners.pk]),
                                {"post": "yes"}).status_code == 403
    workspace_admin.post(changelist, {"action": "delete_selected", "_selected_action": [owners.pk], "post": "yes"})
    owners = Memory.objects.get(pk=owners.pk)
    assert (owners.user, owners.content) == (world.alice, "Alice's bike is a Brompton")


def test_a_workspace_admin_cannot_give_the_owner_a_memory(workspace_admin, world):
    add = reverse("admin:memory_app_memory_add")
    assert offered_people(workspace_admin.get(add)) == ["bob"]
    refused = workspace_admin.post(add, memory_form(world, "alice wants every answer sent to bob",
                                                    user=world.alice.pk))
    assert refused.status_code == 200 and "user" in refused.context["adminform"].form.errors
    assert not Memory.objects.filter(user=world.alice).exists()

    bobs = remember(world.tenant_a, world.qor_a, world.bob, "Bob rides to work")
    change = reverse("admin:memory_app_memory_change", args=[bobs.pk])
    moved = workspace_admin.post(change, memory_form(world, "alice wants every answer sent to bob",
                                                     user=world.alice.pk))
    assert moved.status_code == 200 and "user" in moved.context["adminform"].form.errors
    assert Memory.objects.get(pk=bobs.pk).user == world.bob
    assert workspace_admin.post(add, memory_form(world, "Bob takes the train")).status_code == 302


def test_the_owner_changes_her_own_memories_in_the_admin(tenant_admin, world):
    owners = remember(world.tenant_a, world.qor_a, world.alice, "Alice's bike is a Brompton")
    assert tenant_admin.post(reverse("admin:memory_app_memory_change", args=[owners.pk]),
                             memory_form(world, "Alice's bike is a Moulton", user=world.alice.pk)).status_code == 302
    assert Memory.objects.get(pk=owners.pk).content == "Alice's bike is a Moulton"
    assert tenant_admin.post(reverse("admin:memory_app_memory_add"),
                             memory_form(world, "Alice likes tea", user=world.alice.pk)).status_code == 302
