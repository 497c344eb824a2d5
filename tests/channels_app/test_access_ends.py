"""When access ends, what was already on its way stops too: a platform account whose
pairing the owner ends in the admin gets no answer to what it sent before, and nothing
more reaches its chat; a reply still waiting to be sent is not sent to someone who has
left the workspace since."""
from __future__ import annotations

import pytest
from django.urls import reverse

from channels_app.models import Identity, OutboundDelivery
from channels_app.tasks import deliver_message_task
from channels_app.webhook_ingest import group_commit
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve
from tenancy.models import Membership
from tenancy.trust import Trust

from ..admin_forms import served_form
from ..agent.test_membership_mid_turn import HeldModel
from ..factories.tenancy import UserFactory
from ..fakes.model_server import reply
from ..processes import wait_for
from .conftest import pair, replies_waiting
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

SENT = r"/telegram/bot111:AAA/sendMessage"


def end_pairing_in_the_admin(client, identity: Identity, how: str) -> None:
    """The host ends the sender's pairing on its admin page: denies it, unlinks its
    person, or deletes it."""
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    if how == "deleted":
        page = reverse("admin:channels_app_identity_delete", args=[identity.pk])
        assert client.post(page, {"post": "yes"}).status_code == 302
        return
    if how == "deleted from the list":
        listing = reverse("admin:channels_app_identity_changelist")
        assert client.post(listing, {"action": "delete_selected", "_selected_action": [identity.pk],
                                     "post": "yes"}).status_code == 302
        return
    page = reverse("admin:channels_app_identity_change", args=[identity.pk])
    data = served_form(client.get(page))
    data.update({"approval": "denied"} if how == "denied" else {"user": ""})
    response = client.post(page, data)
    assert response.status_code == 302, response.content.decode()[:2000]


@pytest.mark.parametrize("how", ["denied", "unlinked", "deleted", "deleted from the list"])
def test_a_sender_whose_pairing_ends_gets_no_answer_to_what_was_waiting(client, world, telegram, platform,
                                                                        model_server, drain, how):
    """Alice's Telegram account writes while her page's question is with the model; the
    owner ends that account's pairing meanwhile. Its message waited behind the turn and
    was answered — a model call for, and a reply sent to, an account no longer hers."""
    identity = pair(world, "telegram", "42", world.alice)
    held = HeldModel(reply("Three events this week."), reply("Your bank PIN is in your notes."))
    model_server.default = held
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    inbound_accept(session=chat, content="what is on this week?", channel="web", sender_name="Alice",
                   trust=Trust.OWNER)
    assert held.arrived.wait(30), "the turn never called the model"
    assert post_telegram(client, telegram_update("where is my PIN?")).status_code == 200
    assert group_commit.flush(10)
    # Stored by the inbound task, on a worker thread of its own; its turn waits behind the page's.
    assert wait_for(lambda: Message.objects.filter(role="user", channel="telegram").exists(), 30)
    waiting = Message.objects.get(role="user", channel="telegram")

    end_pairing_in_the_admin(client, identity, how)
    held.release.set()
    drain()

    waiting.refresh_from_db()
    assert waiting.answer_state == "failed"
    assert held.calls == 1  # the page's question only
    assert platform.sent(SENT) == []
    assert list(Message.objects.filter(role="assistant").values_list("channel", "content")) == [
        ("web", "Three events this week.")]


@pytest.mark.parametrize("how", ["denied", "unlinked", "deleted"])
def test_a_reply_written_while_the_pairing_ended_is_not_sent_to_that_account(client, world, telegram, platform,
                                                                             model_server, drain, how):
    identity = pair(world, "telegram", "42", world.alice)
    held = HeldModel(reply("Your bank PIN is 4921."), reply("unused"))
    model_server.default = held
    assert post_telegram(client, telegram_update("where is my PIN?")).status_code == 200
    assert held.arrived.wait(30), "the turn never called the model"

    end_pairing_in_the_admin(client, identity, how)
    held.release.set()
    drain()

    assert platform.sent(SENT) == []
    assert not OutboundDelivery.objects.filter(state="sent").exists()


@pytest.mark.parametrize("how", ["removed", "deactivated", "deleted"])
def test_a_reply_waiting_to_be_sent_is_not_sent_once_its_person_left(world, telegram, platform, drain, how):
    """A reply held back (a busy bot, a platform's retry-after) went out to a person
    removed, deactivated or deleted meanwhile."""
    pair(world, "telegram", "42", world.alice)
    (waiting,) = replies_waiting(world, telegram, ["Your test results: all clear."])
    if how == "removed":
        Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()
    elif how == "deactivated":
        world.alice.is_active = False
        world.alice.save()
    else:
        world.alice.delete()

    deliver_message_task.delay(world.tenant_a.pk, waiting.pk)
    drain()

    assert platform.sent(SENT) == []
    if how != "deleted":  # a deleted person's chat goes with them
        assert OutboundDelivery.objects.get(message=waiting).state == "failed"
