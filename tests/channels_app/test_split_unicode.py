"""Replies in any script, emoji and all, split the way each platform counts them: every
part within its limit as the platform measures it, and no character, emoji or accented
letter cut in two."""
from __future__ import annotations

import pytest
import regex

from channels_app.adapters import adapter_for
from channels_app.split import split_message

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

FAMILY = "👨\u200d👩\u200d👧\u200d👦"  # one emoji: seven code points, eleven UTF-16 units
JAPAN = "🇯🇵"  # one flag: two regional indicators
THUMB = "👍🏽"  # an emoji with its skin tone
ACCENTED = "e\u0301"  # é written as e + a combining acute accent


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def graphemes(text: str) -> list[str]:
    return regex.findall(r"\X", text)


def test_a_telegram_reply_of_emoji_is_split_by_utf16_units_as_telegram_counts(
        client, world, telegram, platform, model_server, drain):
    """Telegram's 4096 is in UTF-16 code units: 3000 😀 are 6000 of them, one part too many."""
    answer = "😀" * 3000
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply(answer))
    post_telegram(client, telegram_update("smile"))
    drain()
    parts = [r.json["text"] for r in platform.sent("sendMessage")]
    assert len(parts) == 2
    assert all(utf16_units(p) <= 4096 for p in parts)
    assert "".join(parts) == answer


@pytest.mark.parametrize("unit", [FAMILY, JAPAN, THUMB, ACCENTED, "字", "😀"],
                         ids=["zwj-family", "flag", "skin-tone", "combining-accent", "cjk", "emoji"])
@pytest.mark.parametrize("kind", ["telegram", "discord", "whatsapp", "slack"])
def test_a_long_word_of_emoji_or_accents_is_never_cut_inside_a_character(unit, kind):
    adapter = adapter_for(kind)
    text = unit * (3 * adapter.limit // len(unit))
    parts = split_message(text, adapter.limit, size=adapter.length)
    assert "".join(parts) == text
    for part in parts:
        assert adapter.length(part) <= adapter.limit
        assert set(graphemes(part)) == {unit}  # whole emoji, whole flags, accents on their letters


def test_a_code_block_of_cjk_longer_than_a_telegram_part_is_reopened_within_the_limit():
    adapter = adapter_for("telegram")
    code = "```\n" + "".join(f"# 注释 {'😀' * 40} {i}\n" for i in range(200)) + "```"
    parts = split_message(code, adapter.limit, size=adapter.length)
    assert len(parts) > 1
    for part in parts:
        assert adapter.length(part) <= adapter.limit
        assert part.startswith("```\n") and part.endswith("```")


def test_a_grapheme_longer_than_a_part_is_still_sent_whole_in_pieces():
    """Zalgo text: one letter with thousands of marks. It cannot fit; it is cut, not lost."""
    text = "a" + "\u0301" * 5000
    parts = split_message(text, 2000)
    assert "".join(parts) == text and all(len(p) <= 2000 for p in parts)
