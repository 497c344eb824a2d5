"""Telegram message edits (`edited_message`): an edit that adds a mention of the bot to a
group message it did not answer asks the question; no edit ever gets a second answer."""
from __future__ import annotations

import pytest

from sessions_app.models import Message
from sessions_app.search import conversation_search

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

GROUP = dict(chat_id=-1007, chat_type="supergroup")


def edited(update: dict) -> dict:
    """The update Telegram sends when that message is edited: the message, as it now reads."""
    message = update.pop("message")
    return {**update, "update_id": update["update_id"] + 500, "edited_message": {**message, "edit_date": 2}}


def _user_lines() -> list[str]:
    return list(Message.objects.filter(role="user").order_by("seq").values_list("content", flat=True))


def test_an_edit_that_mentions_the_bot_in_a_group_asks_the_question_once(
    client, world, telegram, platform, model_server, drain
):
    """An edit was ignored: someone who wrote a question and then added @aria_bot to it
    (as people do, having forgotten) was never answered."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Sunny, 24°C.")
    post_telegram(client, telegram_update("what's the weather in Lisbon?", first_name="Alice", message_id=7, **GROUP))
    drain()
    assert model_server.requests == []
    post_telegram(client, edited(telegram_update("@aria_bot what's the weather in Lisbon?", first_name="Alice",
                                                 message_id=7, **GROUP)))
    drain()
    post_telegram(client, edited(telegram_update("@aria_bot what's the weather in Lisbon tomorrow?",
                                                 first_name="Alice", message_id=7, **GROUP)))
    drain()
    (asked,) = model_server.requests
    assert asked["messages"][-1]["content"].endswith("@aria_bot what's the weather in Lisbon?")
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Sunny, 24°C."]
    assert _user_lines() == ["@aria_bot what's the weather in Lisbon?"]


def test_an_edit_that_asks_is_the_message_it_edits_stored_once_where_it_was_written(
    client, world, telegram, platform, model_server, drain
):
    """The edit was stored as a second message beside the original: the conversation (its
    history, its search, the model's window) read the question twice."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Sunny, 24°C.")
    post_telegram(client, telegram_update("what's the weather in Lisbon?", first_name="Alice", message_id=7, **GROUP))
    drain()  # two senders' messages are stored in the order their tasks run: Alice's first here
    post_telegram(client, telegram_update("no idea", user_id=77, first_name="Carol", message_id=8, **GROUP))
    drain()
    post_telegram(client, edited(telegram_update("@aria_bot what's the weather in Lisbon?", first_name="Alice",
                                                 message_id=7, **GROUP)))
    drain()
    rows = list(Message.objects.order_by("seq").values_list("seq", "role", "content", "external_id"))
    assert rows == [(1, "user", "@aria_bot what's the weather in Lisbon?", "-1007:7"),
                    (2, "user", "no idea", "-1007:8"), (3, "assistant", "Sunny, 24°C.", "")]
    question = Message.objects.get(seq=1)
    assert question.answer_state == "answered" and "no_reply" not in question.metadata
    assert question.metadata["edited_from"] == "what's the weather in Lisbon?"
    assert Message.objects.get(seq=3).metadata["reply_to"] == 1
    (asked,) = model_server.requests
    said = "\n".join(str(m["content"]) for m in asked["messages"][1:])
    assert said.count("weather in Lisbon") == 1 and asked["messages"][-1]["content"].endswith("Lisbon?")
    assert [s.json for s in platform.sent("sendMessage")] == [{"chat_id": "-1007", "text": "Sunny, 24°C.", "parse_mode": "HTML"}]
    found = conversation_search(session=question.session, query="Lisbon", limit=10, offset=0)
    assert [hit.seq for hit in found] == [1]


def test_an_edit_of_an_answered_question_is_not_answered_again(client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Booked.")
    post_telegram(client, telegram_update("@aria_bot book a table", first_name="Alice", message_id=8, **GROUP))
    drain()
    post_telegram(client, edited(telegram_update("@aria_bot book a table for two", first_name="Alice", message_id=8,
                                                 **GROUP)))
    post_telegram(client, edited(telegram_update("book a table for two", first_name="Alice", message_id=8, **GROUP)))
    post_telegram(client, edited(telegram_update("actually, what time is it?", message_id=9)))  # a DM's edit
    drain()
    assert len(model_server.requests) == 1
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Booked."]
    assert _user_lines() == ["@aria_bot book a table"]


def test_the_webhook_is_registered_for_edits(world, telegram, platform, settings):
    from channels_app.adapters import adapter_for

    settings.QORVEN_PUBLIC_URL = "https://qorven.example"
    platform.script(r"/setWebhook", Canned(body={"ok": True, "result": True}))
    adapter_for("telegram").webhook_register(telegram)
    (registered,) = platform.sent(r"/setWebhook")
    assert registered.json["allowed_updates"] == ["message", "edited_message"]


def test_a_command_edited_into_a_group_message_is_answered_as_a_command_once(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    post_telegram(client, telegram_update("status?", first_name="Alice", message_id=9, **GROUP))
    drain()
    post_telegram(client, edited(telegram_update("/status@aria_bot", first_name="Alice", message_id=9, **GROUP)))
    drain()
    assert model_server.requests == []
    (sent,) = platform.sent("sendMessage")
    assert sent.json["text"].startswith("Qor: ")
    assert _user_lines() == ["status?", "/status@aria_bot"]
