"""Telegram forum topics: a supergroup with topics is one group chat, and the Qor answers in
the topic the question was asked in."""
from __future__ import annotations

import pytest

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

FORUM = dict(chat_id=-100888, chat_type="supergroup")


def test_a_question_asked_in_a_forum_topic_is_answered_in_that_topic_every_part_of_it(
    client, world, telegram, platform, model_server, drain
):
    """The reply went to the group's main topic (General), away from the question: the
    sendMessage named the chat and no topic."""
    pair(world, "telegram", "42", world.alice)
    long = "\n\n".join(f"Step {n}: " + "stir the sauce gently. " * 20 for n in range(20))  # past 4096: split
    # Two topics are two conversations, whose turns may run in either order.
    model_server.default = lambda body: reply(long if "sauce" in _asked(body) else "Eight.")
    post_telegram(client, telegram_update("@aria_bot how do I make the sauce?", first_name="Alice", message_id=10,
                                          message_thread_id=7, is_topic_message=True, **FORUM))
    post_telegram(client, telegram_update("@aria_bot what time is dinner?", first_name="Alice", message_id=11,
                                          **FORUM))  # in General: no topic named
    drain()
    sent = platform.sent(r"/bot111:AAA/sendMessage")
    in_topic = [s.json for s in sent if "message_thread_id" in s.json]
    assert len(in_topic) > 1 and " ".join(p["text"] for p in in_topic).split() == long.split()
    assert all((p["chat_id"], p["message_thread_id"]) == ("-100888", 7) for p in in_topic)
    assert [s.json for s in sent if "message_thread_id" not in s.json] == [{"chat_id": "-100888", "text": "Eight.",
                                                                              "parse_mode": "HTML"}]


def test_a_reply_thread_in_a_group_without_topics_is_answered_in_the_chat(
    client, world, telegram, platform, model_server, drain
):
    """Telegram names a thread for a reply in any supergroup, topics or not; only a forum
    topic is one to answer in (sendMessage refuses a thread id in a group without topics)."""
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Eight it is."))
    said = {"message_id": 5, "chat": {"id": -100888, "type": "supergroup"}, "date": 1, "text": "Dinner at 8?",
            "from": {"id": 111, "is_bot": True, "first_name": "Aria", "username": "aria_bot"}}
    post_telegram(client, telegram_update("ok, book it", first_name="Alice", message_id=6, message_thread_id=5,
                                          reply_to_message=said, **FORUM))
    drain()
    (sent,) = platform.sent(r"/bot111:AAA/sendMessage")
    assert sent.json == {"chat_id": "-100888", "text": "Eight it is.", "parse_mode": "HTML"}


def _asked(request: dict) -> str:
    return "\n".join(str(m.get("content")) for m in request["messages"])


def test_each_forum_topic_is_a_conversation_of_its_own(client, world, telegram, platform, model_server, drain):
    """Every topic of a forum was one group session: a question in "Travel" went to the
    model with "Work"'s messages in its context, and /history in a topic showed the others."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = lambda body: reply("Book the 9:40 train." if "train" in _asked(body) else
                                              "Ship it on Friday.")
    work, travel = dict(is_topic_message=True, message_thread_id=30), dict(is_topic_message=True,
                                                                            message_thread_id=40)
    post_telegram(client, telegram_update("the release slips to Friday", user_id=77, first_name="Carol",
                                          message_id=20, **work, **FORUM))
    post_telegram(client, telegram_update("I land in Lisbon at noon", user_id=77, first_name="Carol",
                                          message_id=21, **travel, **FORUM))
    drain()
    post_telegram(client, telegram_update("@aria_bot which train should I take?", first_name="Alice",
                                          message_id=22, **travel, **FORUM))
    drain()
    post_telegram(client, telegram_update("@aria_bot when do we ship?", first_name="Alice", message_id=23,
                                          **work, **FORUM))
    drain()
    post_telegram(client, telegram_update("/history@aria_bot", first_name="Alice", message_id=24, **travel, **FORUM))
    drain()
    on_travel, on_work = model_server.requests
    assert "Lisbon" in _asked(on_travel) and "release" not in _asked(on_travel)
    assert "release" in _asked(on_work) and "Lisbon" not in _asked(on_work) and "train" not in _asked(on_work)
    sent = [(s.json.get("message_thread_id"), s.json["text"]) for s in platform.sent(r"/bot111:AAA/sendMessage")]
    assert sent[:2] == [(40, "Book the 9:40 train."), (30, "Ship it on Friday.")]
    (topic, history), = sent[2:]
    assert topic == 40 and "which train" in history and "Book the 9:40 train." in history
    assert "release" not in history and "ship" not in history


def test_the_general_topic_and_a_group_without_topics_keep_the_chat_as_their_conversation(
    client, world, telegram, platform, model_server, drain
):
    """Sessions stored before topics had their own are keyed by the chat id: General and a
    group without topics go on there, with what they already hold."""
    from sessions_app.models import Session
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    before = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-100888",
                             group=True)
    message_append(session=before, role="user", content="Carol: the boat leaves at six", channel="telegram",
                   notify=False)
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("At six."))
    post_telegram(client, telegram_update("@aria_bot when does the boat leave?", first_name="Alice", message_id=30,
                                          **FORUM))
    drain()
    (asked,) = model_server.requests
    assert "the boat leaves at six" in _asked(asked)
    assert list(Session.objects.filter(kind="group").values_list("external_thread_id", flat=True)) == ["-100888"]
