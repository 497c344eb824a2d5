"""What `qorven chat` prints of other people's and the model's text: every script as
written, and no terminal control sequence of theirs reaching the owner's terminal (a
Telegram or email sender could otherwise clear the screen, retitle the window, move the
cursor to forge a line, or write the clipboard with OSC 52)."""
from __future__ import annotations

import io
import re
from datetime import datetime

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


def test_a_terminal_printer_wraps_between_words_under_the_text_and_cuts_code_at_the_edge():
    code = "    return some_function(with_arguments, that_make, the_line_too_long)"
    out = io.StringIO()
    HumanPrinter(out, color=True, columns=lambda: 50)(message(
        "Here is a sentence long enough to wrap twice over fifty columns.\n```\n" + code + "\n```\n"
        "- an item of a list that wraps under its own text"))
    rows = OURS.sub("", out.getvalue()).rstrip("\n").split("\n")
    stamp = datetime.fromisoformat("2026-03-01T12:00:00+00:00").astimezone().strftime("%H:%M")
    assert rows == [
        f"{stamp} [telegram] Eve: Here is a sentence long",
        "                      enough to wrap twice over",
        "                      fifty columns.",
        "                      ```",
        "                          return some_function(wi",  # code: cut at the edge, its spaces kept
        "                      ↪ th_arguments, that_make,",
        "                      ↪  the_line_too_long)",
        "                      ```",
        "                      - an item of a list that",
        "                        wraps under its own text",
    ], rows


@pytest.mark.parametrize("text, columns", [
    ("你好世界，这是一条很长的中文消息，用来测试宽字符在终端中的换行。", 24),
    ("👍🏽" * 15 + " " + "🇯🇵" * 12 + " " + "e\u0301" * 30, 16),
    ("👨\u200d👩\u200d👧\u200d👦" * 8 + " ❤️❤️❤️❤️❤️❤️❤️❤️❤️❤️", 12),
], ids=["cjk", "skin-tones-flags-accents", "zwj-vs16"])
def test_rows_of_any_script_fit_the_terminal_and_never_split_a_character(text, columns):
    """A row fits whether the terminal draws an emoji sequence as one character or as its
    parts (tmux draws a thumb and its skin tone in 4 cells), and no row begins with half of
    one: a skin tone, a flag's second letter, an accent, a joiner."""
    from wcwidth import iter_graphemes, wcwidth

    from channels_app.terminal_rows import fold

    rows = fold(text, columns, indent=0)
    assert "".join(rows).replace(" ", "") == text.replace(" ", "")
    assert len(rows) > 1
    graphemes = list(iter_graphemes(text))
    for row in rows:
        assert sum(max(wcwidth(char), 0) for char in row) < columns, rows
        assert all(g in graphemes or g == " " for g in iter_graphemes(row)), rows
    if text.startswith("你"):  # broken between ideographs, not only at spaces: every row but the last full
        assert all(sum(2 for _ in row) >= columns - 3 for row in rows[:-1]), rows


def test_a_command_or_a_path_is_not_cut_after_its_slash():
    """Unicode allows a break after "/" (a link's parts), which put "/" at the end of one
    row and "quit" at the start of the next."""
    from channels_app.terminal_rows import fold

    rows = fold("Messages from every channel appear here. Ctrl-C stops a reply; Ctrl-D or /quit leaves.", 40,
                indent=0)
    assert any("/quit" in row for row in rows), rows


def test_a_terminal_narrowed_below_a_rows_indent_still_gets_every_word():
    """A reply's further rows keep the indent they began with; the terminal narrowed
    below it mid-line, cutting the row looped for ever (the terminal froze)."""
    from channels_app.terminal_rows import fold

    rows = fold(" " * 10 + "abc def ghi", 5, indent=10, keep=10)
    assert " ".join(rows).split() == ["abc", "def", "ghi"], rows
