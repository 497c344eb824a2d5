"""`/history` in a group chat: its answer is posted where everyone in the group reads it,
so it shows only what the person asking was there for — from their first message in the
group on — never what the group said before they came."""
from __future__ import annotations

import pytest

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

GROUP = dict(chat_id=-100555, chat_type="supergroup")
SENT = r"/bot111:AAA/sendMessage"


def _say(client, drain, text: str, *, user_id: int, name: str, message_id: int, **where) -> None:
    post_telegram(client, telegram_update(text, user_id=user_id, first_name=name, message_id=message_id,
                                          **(where or GROUP)))
    drain()


def _history_shown(platform) -> str:
    return platform.sent(SENT)[-1].json["text"]


def test_a_groups_history_shows_someone_who_came_later_nothing_said_before_they_first_wrote(
    client, world, telegram, platform, model_server, drain
):
    """Bob, paired and new to the group, asked `/history@aria_bot 50`: the whole group's
    past was posted for him — and everyone else who joined late — to read."""
    pair(world, "telegram", "42", world.alice)
    pair(world, "telegram", "43", world.bob)
    model_server.default = reply("Noted.")
    _say(client, drain, "the door code is 4471", user_id=77, name="Carol", message_id=1)
    _say(client, drain, "morning all", user_id=42, name="Alice", message_id=2)
    _say(client, drain, "the spare key is under the pot", user_id=77, name="Carol", message_id=3)

    _say(client, drain, "/history@aria_bot 50", user_id=43, name="Bob", message_id=4)
    shown = _history_shown(platform)
    assert "4471" not in shown and "spare key" not in shown and "morning" not in shown
    assert "since you first wrote" in shown

    _say(client, drain, "hi, I'm new here", user_id=43, name="Bob", message_id=5)
    _say(client, drain, "welcome Bob", user_id=77, name="Carol", message_id=6)
    _say(client, drain, "/history@aria_bot 50", user_id=43, name="Bob", message_id=7)
    shown = _history_shown(platform)
    assert "I'm new here" in shown and "welcome Bob" in shown
    assert "4471" not in shown and "spare key" not in shown and "morning" not in shown

    _say(client, drain, "/history@aria_bot 50", user_id=42, name="Alice", message_id=8)
    shown = _history_shown(platform)
    assert "morning all" in shown and "spare key" in shown and "welcome Bob" in shown
    assert "4471" not in shown


def test_a_members_own_chat_history_is_unchanged(client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Noted.")
    _say(client, drain, "remember the dentist", user_id=42, name="Alice", message_id=1, chat_type="private")
    _say(client, drain, "/history 50", user_id=42, name="Alice", message_id=2, chat_type="private")
    shown = _history_shown(platform)
    assert "remember the dentist" in shown and "Noted." in shown


def test_a_groups_search_finds_for_someone_who_came_later_only_what_was_said_since_they_first_wrote(
    client, world, telegram, platform, model_server, drain
):
    """`/search` answers in the group as `/history` does: Bob's first command there found
    the door code Carol gave the group before he came."""
    pair(world, "telegram", "42", world.alice)
    pair(world, "telegram", "43", world.bob)
    model_server.default = reply("Noted.")
    _say(client, drain, "the door code is 4471", user_id=77, name="Carol", message_id=1)
    _say(client, drain, "door code changes on Monday", user_id=42, name="Alice", message_id=2)

    _say(client, drain, "/search@aria_bot door code", user_id=43, name="Bob", message_id=3)
    shown = _history_shown(platform)
    assert "4471" not in shown and "Monday" not in shown
    assert "since you first wrote" in shown

    _say(client, drain, "what is the door code now?", user_id=43, name="Bob", message_id=4)
    _say(client, drain, "the door code is 9902 from today", user_id=77, name="Carol", message_id=5)
    _say(client, drain, "/search@aria_bot door code", user_id=43, name="Bob", message_id=6)
    shown = _history_shown(platform)
    assert "9902" in shown and "4471" not in shown and "Monday" not in shown

    _say(client, drain, "/search@aria_bot door code", user_id=42, name="Alice", message_id=7)
    shown = _history_shown(platform)
    assert "9902" in shown and "Monday" in shown and "4471" not in shown
