"""A run of one formatting character longer than a part ("~~~~…", "````…", "____…"), which
the whole reply shows as text: cut over parts (channels_app.formatting.reply_parts), every
character of it reaches the person, in parts that each fit, on every platform. A part begun
inside the run does not open a code block (an empty one, left out) or show a rule the whole
did not have."""
from __future__ import annotations

import html
import re

import pytest

from channels_app.adapters import adapter_for
from channels_app.formatting import TELEGRAM_HTML, reply_parts

from ..fakes.chat_markers import code_blocks
from ..fakes.telegram_html import visible_text

KINDS = ["telegram", "whatsapp", "slack", "discord", "sms"]


def _read_back(kind: str, part: str) -> str:
    """What a person reads of `part`: Telegram's HTML as it shows it; Discord's Markdown as
    Markdown reads it; Slack's and WhatsApp's code blocks' code and the text around them
    (their fences and zero-width spaces are not seen); an SMS as it is."""
    if kind == "telegram":
        return visible_text(part)
    if kind == "discord":
        return visible_text(TELEGRAM_HTML.markdown(part))
    if kind in ("slack", "whatsapp"):
        blocks, outside = code_blocks(part)
        return html.unescape("".join(blocks) + outside) if kind == "slack" else "".join(blocks) + outside
    return part


def _characters(text: str) -> str:
    """`text` without what cutting may add or take between parts: white space, and the
    quote's marker each part begins with again."""
    return re.sub(r"[\s>]", "", text)


def _parts(kind: str, text: str, limit: int) -> list[str]:
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    assert all(adapter.length(adapter.style.visible(part)) <= limit for part in parts), parts
    return parts


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text", ["x " + "~" * 130, "x " + "`" * 130, "> x " + "~" * 130, "> x " + "`" * 130,
                                  "alpha beta " + "~" * 90 + " gamma", "alpha\n    " + "~" * 90 + " gamma",
                                  "x " + "_" * 130, "x " + "*" * 130, "x " + "-" * 130, "> x " + "_" * 130,
                                  "x " + "_ " * 70, "x " + "- " * 70],
                         ids=["tildes", "backticks", "quoted tildes", "quoted backticks", "tildes in a line",
                              "tildes on an indented line", "underscores", "stars", "dashes", "quoted underscores",
                              "spaced underscores", "spaced dashes"])
def test_a_run_of_one_marker_longer_than_a_part_reaches_the_person_whole(kind, text):
    """"x " then 16,000 tildes on Telegram was one part of 4,094 tildes: each part after it
    began with "~~~", a code block's fence, and was an empty code block, left out; a part
    begun inside underscores, stars or dashes showed a rule ("———") instead."""
    parts = _parts(kind, text, 40)
    assert _characters("".join(_read_back(kind, part) for part in parts)) == _characters(text), parts


@pytest.mark.parametrize("kind", ["telegram", "discord"])
def test_a_run_of_tildes_longer_than_a_telegram_or_discord_part_fills_each(kind):
    limit = 4096 if kind == "telegram" else 2000
    text = "x " + "~" * 16000
    parts = _parts(kind, text, limit)
    assert _characters("".join(_read_back(kind, part) for part in parts)) == _characters(text)
    assert len(parts) <= 16000 // (limit - 20) + 2  # the run fills each (the word before it may go alone)


@pytest.mark.parametrize("kind", ["telegram", "discord"])
@pytest.mark.parametrize("marker", ["_", "*", "-"])
def test_a_line_of_one_rule_marker_longer_than_a_part_reaches_the_person_whole_in_parts_that_fill_it(kind, marker):
    """Each cut tried in the line is checked for the rule the rest of the line would read as."""
    limit = 4096 if kind == "telegram" else 2000
    text = "x " + marker * 6000
    parts = _parts(kind, text, limit)
    assert _characters("".join(_read_back(kind, part) for part in parts)) == _characters(text)
    assert len(parts) <= 6000 // (limit - 20) + 2  # the run fills each (the word before it may go alone)
