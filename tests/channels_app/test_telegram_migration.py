"""A Telegram group upgraded to a supergroup changes its chat id: the old chat gets a
service message naming the new one (`migrate_to_chat_id`), the new chat one naming the old
(`migrate_from_chat_id`). The group's conversation goes on under the new id, with what was
said before the upgrade, and its answers go to the new chat."""
from __future__ import annotations

import time

import pytest

from channels_app.models import OutboundDelivery
from channels_app.services import binding_create
from sessions_app.models import Message, Session

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .payloads import _update_id, post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

OLD, NEW = -4001, -1004001
SENT = r"/bot111:AAA/sendMessage"


def _migration(side: str, *, message_id: int, secret: str = "tg-secret-a") -> dict:
    """The service message Telegram sends as the group is upgraded, in the old chat
    ("to") or in the new supergroup ("from")."""
    _update_id[0] += 1
    chat = {"id": OLD, "type": "group", "title": "Boat trip"} if side == "to" else {
        "id": NEW, "type": "supergroup", "title": "Boat trip"}
    field = {"migrate_to_chat_id": NEW} if side == "to" else {"migrate_from_chat_id": OLD}
    return {"update_id": _update_id[0], "message": {
        "message_id": message_id, "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
        "chat": chat, "date": int(time.time()), **field}}


def _asked(request: dict) -> str:
    return "\n".join(str(m.get("content")) for m in request["messages"])


def _before_the_upgrade(client, world, platform, model_server, drain) -> None:
    pair(world, "telegram", "42", world.alice)
    model_server.default = lambda body: reply("Pier 3, at seven." if "boat" in _asked(body) else "Noted.")
    post_telegram(client, telegram_update("the boat leaves from pier 3 at seven", user_id=77, first_name="Carol",
                                          chat_id=OLD, chat_type="group", message_id=1))
    drain()  # two senders' messages are taken side by side: in this order
    post_telegram(client, telegram_update("@aria_bot remember the snacks", first_name="Alice", chat_id=OLD,
                                          chat_type="group", message_id=2))
    drain()
    assert [s.json["chat_id"] for s in platform.sent(SENT)] == [str(OLD)]


@pytest.mark.parametrize("order", [("to", "from"), ("from", "to"), ("to", "to", "from", "from")])
def test_a_group_upgraded_to_a_supergroup_goes_on_with_its_conversation_and_is_answered_there(
    client, world, telegram, platform, model_server, drain, order
):
    """The supergroup started a new group session with an empty context, and the old chat's
    id, where replies were addressed, was gone. Telegram sends both service messages, in
    either order, and may send either again."""
    _before_the_upgrade(client, world, platform, model_server, drain)
    for n, side in enumerate(order):
        # A retry is the same message again; the old chat's and the new chat's are two.
        assert post_telegram(client, _migration(side, message_id=3 if side == "to" else 1)).status_code == 200
        if n % 2:
            drain()
    drain()
    post_telegram(client, telegram_update("@aria_bot when does the boat leave?", first_name="Alice", chat_id=NEW,
                                          chat_type="supergroup", message_id=2))
    drain()

    (group,) = Session.objects.filter(kind="group")
    assert group.external_thread_id == str(NEW)
    assert "pier 3 at seven" in _asked(model_server.requests[-1])
    assert [s.json["chat_id"] for s in platform.sent(SENT)] == [str(OLD), str(NEW)]
    assert platform.sent(SENT)[-1].json["text"] == "Pier 3, at seven."
    assert not Message.objects.filter(content="").exists()  # the service messages are not chatter


def test_a_reply_to_a_question_asked_just_before_the_upgrade_reaches_the_supergroup(
    client, world, telegram, platform, model_server, drain
):
    """Telegram refuses a message to the old chat (400, migrate_to_chat_id): the answer
    to a question asked as the group was upgraded failed for good."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Seven.")
    platform.script(SENT, Canned(400, {"ok": False, "error_code": 400,
                                       "description": "Bad Request: group chat was upgraded to a supergroup chat",
                                       "parameters": {"migrate_to_chat_id": NEW}}))
    post_telegram(client, telegram_update("@aria_bot when do we leave?", first_name="Alice", chat_id=OLD,
                                          chat_type="group", message_id=5))
    drain()
    assert [s.json["chat_id"] for s in platform.sent(SENT)] == [str(OLD), str(NEW)]
    assert OutboundDelivery.objects.get().state == OutboundDelivery.State.SENT


def test_a_waiting_reply_to_the_old_chat_and_a_question_still_unanswered_go_to_the_new_one(
    client, world, telegram, platform, model_server, drain
):
    """A reply whose part waits for the bot (backing off after a 5xx) and a question still
    to be answered named the old chat: both went there after the upgrade."""
    from datetime import timedelta

    from django.utils import timezone

    from channels_app.sending import deliver_message
    from sessions_app.services.append import message_append

    _before_the_upgrade(client, world, platform, model_server, drain)
    (group,) = Session.objects.filter(kind="group")
    waiting = message_append(session=group, role="assistant", content="Snacks noted.", channel="telegram",
                             notify=False).message
    OutboundDelivery.objects.create(tenant=world.tenant_a, message=waiting, part=0, binding=telegram,
                                    target=str(OLD), text="Snacks noted.",
                                    not_before=timezone.now() + timedelta(hours=1))
    unanswered = message_append(session=group, role="user", content="@aria_bot and the boat?", channel="telegram",
                                sender_name="Alice", notify=False,
                                metadata={"binding": telegram.pk, "reply_target": str(OLD), "sender_id": "42"},
                                awaits_answer=True).message
    Message.objects.filter(pk=unanswered.pk).update(answer_state="failed")  # /retry can bring it back
    post_telegram(client, _migration("from", message_id=1))
    drain()
    OutboundDelivery.objects.filter(message=waiting).update(not_before=None)
    deliver_message(tenant_id=world.tenant_a.pk, message_id=waiting.pk, worker="test")
    assert platform.sent(SENT)[-1].json == {"chat_id": str(NEW), "text": "Snacks noted.", "parse_mode": "HTML"}
    unanswered.refresh_from_db()
    assert unanswered.metadata["reply_target"] == str(NEW)


def test_an_upgrade_seen_by_one_tenants_bot_leaves_another_tenants_group_session_alone(
    client, world, telegram, platform, model_server, drain
):
    """Two tenants' bots in one group: each binding's migration moves its own Qor's session."""
    _before_the_upgrade(client, world, platform, model_server, drain)
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram", group_answers="anyone",
                   credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "globex_bot"})
    post_telegram(client, telegram_update("hello globex", user_id=77, first_name="Carol", chat_id=OLD,
                                          chat_type="group", message_id=1), secret="tg-secret-b")
    drain()
    post_telegram(client, _migration("to", message_id=3))
    drain()
    keys = dict(Session.objects.filter(kind="group").values_list("tenant_id", "external_thread_id"))
    assert keys == {world.tenant_a.pk: str(NEW), world.tenant_b.pk: str(OLD)}


def test_a_supergroup_message_taken_before_the_upgrade_notice_joins_the_groups_conversation(
    client, world, telegram, platform, model_server, drain
):
    """Its session, started under the new id, is folded into the group's: one conversation,
    in the order things were said."""
    _before_the_upgrade(client, world, platform, model_server, drain)
    post_telegram(client, telegram_update("bring sunscreen too", user_id=77, first_name="Carol", chat_id=NEW,
                                          chat_type="supergroup", message_id=2))
    drain()
    post_telegram(client, _migration("to", message_id=3))
    drain()
    post_telegram(client, telegram_update("@aria_bot what do I bring for the boat?", first_name="Alice",
                                          chat_id=NEW, chat_type="supergroup", message_id=3))
    drain()
    (group,) = Session.objects.filter(kind="group", state="active")
    assert group.external_thread_id == str(NEW)
    said = list(Message.objects.filter(session=group).order_by("seq").values_list("content", flat=True))
    assert said[0] == "the boat leaves from pier 3 at seven" and said[-2:] == ["@aria_bot what do I bring for the boat?",
                                                                            "Pier 3, at seven."]
    assert "bring sunscreen too" in said
    asked = _asked(model_server.requests[-1])
    assert "pier 3" in asked and "sunscreen" in asked


@pytest.mark.parametrize("sender", [(42, "Alice"), (77, "Carol")], ids=["asked", "chatter"])
def test_a_message_of_the_old_group_taken_after_the_upgrade_joins_the_groups_conversation(
    client, world, telegram, platform, model_server, drain, sender
):
    """Sent in the old group just before the upgrade and taken after both notices: it
    started a conversation of its own under the old chat's id, without what was said
    before, and its answer went to the old chat."""
    _before_the_upgrade(client, world, platform, model_server, drain)
    post_telegram(client, _migration("to", message_id=4))
    post_telegram(client, _migration("from", message_id=1))
    drain()
    user_id, name = sender
    text = "@aria_bot when does the boat leave?" if user_id == 42 else "I'll bring the boat snacks"
    post_telegram(client, telegram_update(text, user_id=user_id, first_name=name, chat_id=OLD, chat_type="group",
                                          message_id=3))
    drain()

    (group,) = Session.objects.filter(kind="group")
    assert group.external_thread_id == str(NEW)
    said = list(Message.objects.filter(session=group).order_by("seq").values_list("content", flat=True))
    assert said[0] == "the boat leaves from pier 3 at seven" and text in said
    if user_id == 42:
        assert "pier 3 at seven" in _asked(model_server.requests[-1])
        assert [s.json["chat_id"] for s in platform.sent(SENT)] == [str(OLD), str(NEW)]
        assert platform.sent(SENT)[-1].json["text"] == "Pier 3, at seven."
    else:
        assert [s.json["chat_id"] for s in platform.sent(SENT)] == [str(OLD)]


def test_a_late_message_of_an_old_group_finds_its_conversation_in_its_own_tenant_only(
    client, world, telegram, platform, model_server, drain
):
    """Another tenant's bot saw no upgrade: its late message from the same chat stays in its
    own conversation of that chat."""
    _before_the_upgrade(client, world, platform, model_server, drain)
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram", group_answers="anyone",
                   credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "globex_bot"})
    post_telegram(client, _migration("to", message_id=4))
    drain()
    post_telegram(client, telegram_update("hello globex", user_id=77, first_name="Carol", chat_id=OLD,
                                          chat_type="group", message_id=3), secret="tg-secret-b")
    drain()
    keys = dict(Session.objects.filter(kind="group").values_list("tenant_id", "external_thread_id"))
    assert keys == {world.tenant_a.pk: str(NEW), world.tenant_b.pk: str(OLD)}
