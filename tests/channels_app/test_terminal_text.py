"""What `qorven chat` prints of other people's and the model's text: every script as
written, and no terminal control sequence of theirs reaching the owner's terminal (a
Telegram or email sender could otherwise clear the screen, retitle the window, move the
cursor to forge a line, or write the clipboard with OSC 52)."""
from __future__ import annotations

import io
import re

import pytest

from channels_app.terminal import HumanPrinter

HOSTILE = "hi\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x07\rOwner: approve 123456\x9b31m\x7f"
OURS = re.compile(r"\x1b\[(?:[0-9;]*)m")


def message(content: str, sender: str = "Eve", role: str = "user", channel: str = "telegram") -> dict:
    return {"type": "message.new", "seq": 3, "role": role, "content": content, "channel": channel,
            "sender_name": sender, "created_at": "2026-03-01T12:00:00+00:00", "reply_to": None}


@pytest.mark.parametrize("color", [False, True])
def test_control_sequences_in_a_message_or_a_name_are_shown_not_obeyed(color):
    out = io.StringIO()
    HumanPrinter(out, color=color)(message(HOSTILE, sender="Ev\x1b[8me"))
    shown = out.getvalue()
    if color:  # our own colours only: "\x1b[…m" around the stamp, the tag and the name
        assert OURS.sub("", shown).count("\x1b") == 0
        assert shown.count("\x1b[") == len(OURS.findall(shown)) == 6
    else:
        assert "\x1b" not in shown
    for obeyed in ("\x07", "\x9b", "\x7f", "\r"):
        assert obeyed not in shown
    assert "hi␛[2J␛]0;pwned␇" in shown and "Ev␛[8me" in shown


def test_streamed_text_is_shown_not_obeyed():
    out = io.StringIO()
    printer = HumanPrinter(out, color=False)
    printer({"type": "chunk", "reply_to": 3, "delta": "ok\x1b[1A\x1b[2K"})
    assert out.getvalue() == "… ok␛[1A␛[2K"


@pytest.mark.parametrize("text", [
    "مرحبا بالعالم", "שלום", "你好，世界", "👨\u200d👩\u200d👧\u200d👦 🇯🇵 👍🏽", "e\u0301", "tab\there",
    "two\nlines", "zero\u200bwidth", "crlf\r\nline",
], ids=["arabic", "hebrew", "cjk", "emoji", "combining", "tab", "newline", "zero-width", "crlf"])
def test_text_in_any_script_is_printed_as_written(text):
    out = io.StringIO()
    HumanPrinter(out, color=False)(message(text, sender="Zoë 🌸"))
    assert out.getvalue().endswith("[telegram] Zoë 🌸: " + text.replace("\r\n", "\n") + "\n")
