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
    model_server.add(reply(long))
    model_server.add(reply("Eight."))
    post_telegram(client, telegram_update("@aria_bot how do I make the sauce?", first_name="Alice", message_id=10,
                                          message_thread_id=7, is_topic_message=True, **FORUM))
    post_telegram(client, telegram_update("@aria_bot what time is dinner?", first_name="Alice", message_id=11,
                                          **FORUM))  # in General: no topic named
    drain()
    sent = platform.sent(r"/bot111:AAA/sendMessage")
    in_topic = [s.json for s in sent if "message_thread_id" in s.json]
    assert len(in_topic) > 1 and "".join(p["text"] for p in in_topic).replace("\n", "") == long.replace("\n", "")
    assert all((p["chat_id"], p["message_thread_id"]) == ("-100888", 7) for p in in_topic)
    assert [s.json for s in sent if "message_thread_id" not in s.json] == [{"chat_id": "-100888", "text": "Eight."}]


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
    assert sent.json == {"chat_id": "-100888", "text": "Eight it is."}
