"""How WhatsApp and Slack read their formatting characters in a message's text, as far as
what we send depends on it: `*bold*`, `_italic_`, `~strike~` and `` `code` `` format only
between a marker at a boundary — the start, a space or punctuation before it, something
not a space after — and a marker after something not a space, followed by the end, a space
or punctuation; on one line. A marker inside a word (my_file_name) formats nothing.
Neither platform has an escape; a zero-width space (U+200B) is no boundary: it joins the
characters on its two sides as a letter would.
"""
from __future__ import annotations

import re

MARKERS = "*_~`"
ZERO_WIDTH = "\u200b"


def _boundary(char: str | None) -> bool:
    return char is None or not (char.isalnum() or char == ZERO_WIDTH)


def formatted(text: str) -> list[str]:
    """The spans of `text` (markers included) that WhatsApp or Slack would show formatted."""
    spans = []
    for line in text.split("\n"):
        i = 0
        while i < len(line):
            marker = line[i]
            before = line[i - 1] if i else None
            after = line[i + 1] if i + 1 < len(line) else None
            if marker in MARKERS and _boundary(before) and after is not None and not after.isspace():
                for j in range(i + 2, len(line)):
                    after_close = line[j + 1] if j + 1 < len(line) else None
                    if line[j] == marker and not line[j - 1].isspace() and _boundary(after_close):
                        spans.append(line[i:j + 1])
                        i = j
                        break
            i += 1
    return spans


def shown(text: str) -> str:
    """What a person reads of `text`: zero-width spaces are not seen."""
    return text.replace(ZERO_WIDTH, "")


FENCE = "```"
_LANGUAGE = re.compile(r"^[a-z0-9_+\-.#]+?\n", re.IGNORECASE)


def code_blocks(text: str, *, languages: bool = False) -> tuple[list[str], str]:
    """The code blocks Slack, WhatsApp or Discord shows in `text`, as a person reads them,
    and what is shown outside them: a block opens at three backticks and ends at the next
    three, wherever they are: none of them reads a longer fence (Discord's client matches
    up to the first three backticks after the opening ones), and none has an escape. A
    zero-width space between two backticks keeps them from being three. `languages`: a first line that names one is the
    block's language, not its text (Discord's; Slack and WhatsApp show it as code)."""
    blocks, outside = [], []
    rest = text
    while FENCE in rest:
        before, _, after = rest.partition(FENCE)
        outside.append(before)
        if FENCE not in after:
            outside.append(FENCE + after)  # never closed: shown as written
            rest = ""
            break
        code, _, rest = after.partition(FENCE)
        if languages:
            code = _LANGUAGE.sub("", code, count=1)
        blocks.append(shown(code).strip("\n"))
    outside.append(rest)
    return blocks, shown("".join(outside))
