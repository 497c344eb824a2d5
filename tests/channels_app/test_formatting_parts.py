"""A reply's parts as they are planned (channels_app.formatting.reply_parts): whatever the
model wrote, every part is within its platform's limit as the platform counts it, and on
Telegram every part parses on its own."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channels_app.adapters import adapter_for
from channels_app.formatting import reply_parts

from ..fakes.telegram_html import visible_text

# What Markdown and the platforms read as formatting, and letters between.
_PIECES = ["**", "*", "_", "__", "~~", "`", "```", "```python\n", "\n", "\n\n", "# ", "> ", "- ", "1. ", "| a | b |\n|---|---|\n",
           "[", "](https://example.com/?a=1&b=2)", "<", ">", "&", "&amp;", "\\", "😀", "é", "word ", "x"]
markdownish = st.lists(st.sampled_from(_PIECES), max_size=120).map("".join)


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@settings(max_examples=150, deadline=None)
@given(markdownish, st.integers(min_value=40, max_value=300))
def test_every_telegram_part_parses_and_shows_at_most_the_limit(text, limit):
    tg = adapter_for("telegram")
    parts = reply_parts(text, style=tg.style, limit=limit, size=tg.length, markdown=True)
    assert parts
    for part in parts:
        assert _utf16(visible_text(part)) <= limit, part  # visible_text raises where Telegram would refuse


@pytest.mark.parametrize("kind", ["slack", "whatsapp", "discord", "sms"])
@settings(max_examples=60, deadline=None)
@given(text=markdownish, limit=st.integers(min_value=40, max_value=300))
def test_every_part_on_the_other_platforms_is_within_the_limit(kind, text, limit):
    adapter = adapter_for(kind)
    for part in reply_parts(text, style=adapter.style, limit=limit, size=adapter.length, markdown=True):
        assert adapter.length(part) <= limit


def test_a_code_block_split_over_parts_keeps_every_line_once_in_a_code_block_of_each():
    tg = adapter_for("telegram")
    code = [f"x{n} = a < b & c  # {n}" for n in range(40)]
    text = "Intro **bold**\n\n```js\n" + "\n".join(code) + "\n```\n\nBye"
    parts = reply_parts(text, style=tg.style, limit=200, size=tg.length, markdown=True)
    blocks = [p for p in parts if "<pre>" in p]
    assert len(blocks) >= 4
    assert all(p.startswith('<pre><code class="language-js">') and p.endswith("</code></pre>") for p in blocks)
    lines = [line for p in blocks for line in visible_text(p).splitlines()]
    assert lines == code


def test_text_of_ours_is_escaped_not_formatted():
    tg, slack = adapter_for("telegram"), adapter_for("slack")
    ours = "**not bold** <b>x</b> & [no](https://link.example)"
    assert reply_parts(ours, style=tg.style, limit=4096, size=tg.length, markdown=False) == [
        "**not bold** &lt;b&gt;x&lt;/b&gt; &amp; [no](https://link.example)"]
    assert reply_parts(ours, style=slack.style, limit=4000, size=slack.length, markdown=False) == [
        "**not bold** &lt;b&gt;x&lt;/b&gt; &amp; [no](https://link.example)"]


def test_a_link_split_from_its_reference_still_links():
    tg = adapter_for("telegram")
    text = "See [the docs][d].\n\n" + "filler " * 30 + "\n\nAgain [the docs][d].\n\n[d]: https://docs.example"
    parts = reply_parts(text, style=tg.style, limit=120, size=tg.length, markdown=True)
    assert sum(p.count('<a href="https://docs.example">the docs</a>') for p in parts) == 2


def test_a_bare_address_in_a_slack_reply_links_as_it_was_written():
    slack = adapter_for("slack")
    (part,) = reply_parts("mail <me@x.example> or see <https://a.example>", style=slack.style, limit=4000,
                          size=slack.length, markdown=True)
    assert part == "mail <mailto:me@x.example|me@x.example> or see <https://a.example>"
