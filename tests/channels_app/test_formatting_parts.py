"""A reply's parts as they are planned (channels_app.formatting.reply_parts): whatever the
model wrote, every part is within its platform's limit as the platform counts it, on
Telegram every part parses on its own, and a reply cut over parts reads as it would whole:
the same text in the same formatting, a list numbered on."""
from __future__ import annotations

import re

import pytest
import regex
from hypothesis import example, given, settings
from hypothesis import strategies as st

from channels_app.adapters import adapter_for
from channels_app.formatting import TELEGRAM_HTML, reply_parts

from ..fakes.chat_markers import code_blocks, formatted, shown
from ..fakes.telegram_html import formatted_chars, visible_text

# What Markdown and the platforms read as formatting, and letters between.
_PIECES = ["**", "*", "_", "__", "~~", "`", "```", "```python\n", "\n", "\n\n", "# ", "> ", "- ", "1. ", "| a | b |\n|---|---|\n",
           "[", "](https://example.com/?a=1&b=2)", "<", ">", "&", "&amp;", "\\", "😀", "é", "word ", "x"]
markdownish = st.lists(st.sampled_from(_PIECES), max_size=120).map("".join)
# Inline code ending in a space, once cut just before its closing backtick: both parts showed backticks.
CODE_ENDING_IN_A_SPACE = "** ** ** ` ](https://example.com/?a=1&b=2) ` **"
# A line of text beginning with ``` (its backtick at the end keeps it from opening a code block),
# once cut so that its first part opened an empty code block: that part was left out, its words lost.
TICKS_OPENING_A_LINE = "``` word word word word word word word x `"
# Inline code over lines, once cut at a line break inside it: the next part began "``` *", a code block.
CODE_OVER_LINES = "e.com/?a=1&< #  ```python\n *\nd  word  #  😀 ```"
# A link's label begun with a space, once cut after it: the first part had a link with no label.
LABEL_BEGUN_WITH_A_SPACE = "o é #  ```pyth[ on ](example.com/?a=1&b=2)"
# Cut where no space was left to cut at, once just before "```python": the last part began a code block.
# Inline code over lines whose closing backticks begin a line cut before its last backtick: they close
# the code, and escaping them as a line's opening backticks showed a backslash in it.
CODE_CLOSED_AT_A_LINES_START = "`` ```on\n ** -  ```://example.com/?a=1&b=2) [ `"
# A heading cut after a word "#": its first part ended " #", which Markdown reads as the heading's closing #s.
HEADING_CUT_AFTER_A_HASH = "# ](https://example.com/?a=1&b=2) >  # d  *"
# A list item's text "__ __" cut after it: alone in its part, the item read as a rule (Telegram's "———").
RULE_IN_A_LIST_ITEM = "1. __ __ " + "x" * 40
# Inline code over lines, its second line begun with ```: a cut in that line was refused as if the line,
# cut there, opened a code block (the backtick that closes the piece's code keeps it text), and the piece
# that could not be cut was cut hard, to nothing: a part showed "``".
CODE_OVER_A_LINE_OF_TICKS = "`word aaaaaaaaaaaaaaaa word\n```word word`"
# The same after a hard cut just before a space: the next piece was that space alone, in code ("``").
BLANK_AFTER_A_HARD_CUT = "`aaaaaaaaaaaaaaaa word _ word\n```word`"
# A code line cut hard into pieces, one of them only backticks: it closed its piece's code block there.
TICKS_ALONE_IN_A_CODE_PIECE = "```\nx" + "`" * 100 + "\n```"
# Emoji with no space between: the cut, checked back from the piece's end where both sides read as they
# did, fell inside a family joined by ZWJs, and both parts showed a broken emoji.
FAMILY = "👨\u200d👩\u200d👧\u200d👦"
FAMILY_CUT_IN_TWO = f"{FAMILY}{FAMILY}🇯🇵**&amp;[{FAMILY}**{FAMILY}"
# A cut before a nested item in a quote: its line began the next part indented four spaces, read as code.
NESTED_IN_A_QUOTE = "> 1. alpha\n>     - alpha\n>     - alpha\n> 1. after"
# A nested list numbered on after a cut: "2." cannot interrupt the "…" before it, and went on as its text.
NESTED_NUMBERED = "- alpha\n  1. gamma\n  1. delta\n  1. gamma\n- after"
# Cut where no space was left to cut at, once just after "**** ****": alone, its part read as a rule.
RULE_BEFORE_A_HARD_CUT = "**** ****   ```python\n"
# Inline code over lines, then a word "```python" on the line after it: every cut was refused (the next
# piece would begin "```python", a code block) and the piece was cut hard inside the code, its "```" lost.
TICKS_BEGINNING_A_PIECE = "` ```python\n ``` ```python\n"
# A part's text, its backticks escaped, no longer fitted where the same text did: it was cut up to the
# text's end, and looking there for a character after it raised.
ESCAPED_TO_THE_END = "> ```\n> " + "x" * 30 + "\n> ```\n> ```"
# Five backticks as text, cut after two: the next part's three were escaped twice over (as a line's
# opening backticks, then as the piece's first), and it showed four.
TICKS_ESCAPED_TWICE = "`````" + "a" * 24 + "`"
# A line of text begun with ``` and a word longer than a part: every cut in the word was refused (the
# piece's line would open a code block, which escaping its first backtick prevents), the text was cut
# as if it were plain, and its first part, an empty code block, was left out.
TICKS_BEFORE_A_LONG_WORD = "```" + "a" * 24 + "``\n`"
# Bold over lines cut where no space is, just before its line break: the next part opened it again
# before the line break, where "**" opens nothing, and showed the markers.
BOLD_CUT_BEFORE_A_LINE_BREAK = "a" * 24 + "**word `\n``**"
# A cut before "****" ending its line: the next part began with it, alone on its line, and showed a rule
# (a line beginning a piece was checked for a rule only when the piece ended with it).
RULE_BEGINNING_A_PART = "``" + "a" * 24 + "  ****\n`"
# Cut where no space is, just after the first "*" of "***": alone in its part, it read as an empty list
# item ("•"), the star lost.
MARKER_ALONE = "*** `````````````"
# A list item cut after its first "**": its text alone ("**") is no rule, but the piece's line, its "*"
# marker with it ("* **"), is one, and the part read "———".
ITEM_READ_AS_A_RULE = "* ** ** ** ](https://example.com/?a=1&b=2)"
NESTED_ITEM_READ_AS_A_RULE = "1.  * ** ** ](https://example.com/?a=1&b=2)"  # "* **" in the ordered item's
# A rule's characters cut off from the start of their line by a cut before: the line's text read from its
# start was no rule, but the piece "__ __" begun after the cut read as one ("———").
RULE_AFTER_A_CUT = "__ __ alpha é __ __ " + "x" * 26
# A list item's text of a rule's characters: every cut was refused as if the next piece began a rule or
# ended one (it begins with the item's "…"), and the item was cut as text, its marker shown as written.
RULE_CHARACTERS_IN_AN_ITEM = "  - é __ __ __ __ __ __"
# Inline code of a space after items nested four deep: their continued markers took 35 of a part's 40,
# no cut left room for the code whole, and the one taken split it, each part showing a lone backtick.
CODE_AFTER_DEEP_NESTING = "1.  1.  * * ](https://example.com/?a=1&b=2) ` `"
# A list item whose text begins with a nested list ("1. - alpha"), cut before its line: the next part went
# on under the item as if the line were inside it ("1. …"), and the item itself was then numbered 2.
ITEM_BEGUN_WITH_A_NESTED_LIST = "Intro words here and more words.\n1. - alpha beta gamma delta\n   - epsilon\n2. two"
ITEM_BEGUN_WITH_A_QUOTE = "Intro words here and more words.\n1. alpha beta gamma delta\n1. > epsilon"  # the same
# Items whose text is two columns after their markers ("1.  "), then a line at column 3: in the whole it is
# out of the second item (its text at column 4), the list's third item; a part that wrote the second item
# continued as "2. …" (its text at column 3) put the line inside it, a nested list numbered "2.".
WIDE_ITEM_GAP = "1. alpha alpha\n1.  1.  alpha alpha alpha alpha\n   1. alpha"
# A paragraph's line indented four spaces (no code: code cannot interrupt a paragraph) begun with a dash:
# cut before it, the next part began at its dash, a list item ("•") where the whole showed a dash.
DASH_ON_AN_INDENTED_LINE = "The options we have, in short, are these:\n    - the first is quick, the second slow"
# A quote in a list item cut over parts: the later parts went on with the quote alone, out of the item, and
# the point nested in the item after it was shown at the top level ("• a sub point", not "   • a sub point").
QUOTE_IN_AN_ITEM = ("1. Step one, read this note:\n   > The note quoted here is long enough that a part cannot "
                    "hold it whole, so it is cut.\n   - a sub point under the step\n2. Step two")
# A nested item indented six columns, where no space was left to cut at but those of its indent: the cut
# fell inside the indent, and the next part began with the item four columns in, read as code.
CUT_IN_AN_INDENT = "alpha\n  - alpha\n      1. alpha"
# A code block in a quote in a list item, cut by its lines: the later parts went on with the quoted code
# out of the item, and the point nested in the item after it was shown at the top level.
QUOTED_CODE_IN_AN_ITEM = ("1. Step one:\n   > ```\n   > code line one here\n   > code line two here\n"
                          "   > code line three\n   > ```\n   - a sub point\n2. Step two")
TICKS_AFTER_A_HARD_CUT = ("```&amp; [ 😀 ](https://example.com/?a=1&b=2) -  word  é & 1.  ** [ - &amp; ~~ mp; ~~ "
                          "](https://example.com/?a=1&b=2) &amp; > ``` * s://example.com/?a=1&b=2) ```python\n ` >  *  ```  * ```")


def cuts_found_before(test):
    """The inputs (with their limits) whose cuts once lost text or formatting, always tried."""
    for text, limit in ((CODE_ENDING_IN_A_SPACE, 40), (TICKS_OPENING_A_LINE, 40), (CODE_OVER_LINES, 40),
                        (LABEL_BEGUN_WITH_A_SPACE, 40), (TICKS_AFTER_A_HARD_CUT, 65),
                        (HEADING_CUT_AFTER_A_HASH, 40), (CODE_CLOSED_AT_A_LINES_START, 40),
                        (RULE_IN_A_LIST_ITEM, 40), (CODE_OVER_A_LINE_OF_TICKS, 17),
                        (BLANK_AFTER_A_HARD_CUT, 17), (TICKS_ALONE_IN_A_CODE_PIECE, 40),
                        (FAMILY_CUT_IN_TWO, 20), (NESTED_IN_A_QUOTE, 30),
                        (NESTED_NUMBERED, 30), (RULE_BEFORE_A_HARD_CUT, 14)):
        test = example(text, limit)(test)
    return test


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@settings(max_examples=150, deadline=None)
@given(markdownish, st.integers(min_value=40, max_value=300))
@cuts_found_before
@example(ESCAPED_TO_THE_END, 14)
def test_every_telegram_part_parses_and_shows_at_most_the_limit(text, limit):
    tg = adapter_for("telegram")
    parts = reply_parts(text, style=tg.style, limit=limit, size=tg.length, markdown=True)
    assert parts
    for part in parts:
        assert _utf16(visible_text(part)) <= limit, part  # visible_text raises where Telegram would refuse


@pytest.mark.parametrize("kind", ["slack", "whatsapp", "discord", "sms"])
@settings(max_examples=60, deadline=None)
@given(text=markdownish, limit=st.integers(min_value=40, max_value=300))
@example(text=CODE_ENDING_IN_A_SPACE, limit=40)
@example(text=TICKS_OPENING_A_LINE, limit=40)
@example(text=CODE_OVER_LINES, limit=40)
@example(text=LABEL_BEGUN_WITH_A_SPACE, limit=40)
@example(text=TICKS_AFTER_A_HARD_CUT, limit=65)
@example(text=HEADING_CUT_AFTER_A_HASH, limit=40)
@example(text=CODE_CLOSED_AT_A_LINES_START, limit=40)
@example(text=RULE_IN_A_LIST_ITEM, limit=40)
@example(text=CODE_OVER_A_LINE_OF_TICKS, limit=17)
@example(text=BLANK_AFTER_A_HARD_CUT, limit=17)
@example(text=TICKS_ALONE_IN_A_CODE_PIECE, limit=40)
@example(text=ESCAPED_TO_THE_END, limit=14)
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


@pytest.mark.parametrize("kind", ["slack", "whatsapp", "discord"])
def test_a_code_block_holding_three_backticks_split_over_parts_shows_whole_in_each(kind):
    """A Markdown example fenced with four backticks, longer than a part: each part shows one
    code block (its three backticks ended none) and together they show the example's lines."""
    adapter = adapter_for(kind)
    code = [line for n in range(12) for line in ("```python", f"print({n})  # step {n}", "```", "")]
    text = "````markdown\n" + "\n".join(code) + "\n````"
    parts = reply_parts(text, style=adapter.style, limit=200, size=adapter.length, markdown=True)
    assert len(parts) >= 3
    read = [code_blocks(part, languages=kind == "discord") for part in parts]
    assert all(len(blocks) == 1 and not outside.strip() for blocks, outside in read), parts
    lines = [line for blocks, _ in read for line in blocks[0].split("\n")]
    assert [line for line in lines if line] == [line for line in code if line]
    assert all(adapter.length(part) <= 200 for part in parts)


@pytest.mark.parametrize("kind", ["telegram", "slack", "whatsapp", "discord"])
@pytest.mark.parametrize("language", ["", "javascript"])
def test_a_code_block_split_over_parts_fills_each_as_the_platform_counts_it(kind, language):
    """A part of code takes as many lines as the platform shows within its limit: Telegram
    shows neither the fences nor the language, Slack and WhatsApp their fences without it."""
    adapter = adapter_for(kind)
    code = [f"x{n} = a + b - c  # {n}" for n in range(60)]
    text = f"```{language}\n" + "\n".join(code) + "\n```"
    parts = reply_parts(text, style=adapter.style, limit=200, size=adapter.length, markdown=True)
    shown = [visible_text(part) if kind == "telegram" else part for part in parts]
    lines = [[line for line in code if line in part] for part in shown]
    assert [line for found in lines for line in found] == code
    for part, found, after in zip(shown, lines, lines[1:], strict=False):
        assert adapter.length(part) <= 200
        grown = part.replace(found[-1], found[-1] + "\n" + after[0])
        assert adapter.length(grown) > 200, part  # else the next part's first line would have fitted


def test_text_of_ours_is_escaped_not_formatted():
    tg, slack = adapter_for("telegram"), adapter_for("slack")
    ours = "**not bold** <b>x</b> & [no](https://link.example)"
    assert reply_parts(ours, style=tg.style, limit=4096, size=tg.length, markdown=False) == [
        "**not bold** &lt;b&gt;x&lt;/b&gt; &amp; [no](https://link.example)"]
    (part,) = reply_parts(ours, style=slack.style, limit=4000, size=slack.length, markdown=False)
    assert shown(part) == "**not bold** &lt;b&gt;x&lt;/b&gt; &amp; [no](https://link.example)"
    assert formatted(part) == []


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


def _telegram(text: str, limit: int) -> list[str]:
    tg = adapter_for("telegram")
    return reply_parts(text, style=tg.style, limit=limit, size=tg.length, markdown=True)


# What begins a part that goes on with a list item's text: the item's marker, then "…" (and before it
# those of the items it is nested in).
CONTINUED = re.compile(r"(?:[\s>]*(?:[•*+-]|\d{1,9}[.)])\s*…)+")  # the items it is in too, each continued


def _continued(shown: str) -> int:
    """How many characters (white space left out) a part showing `shown` begins with that
    mark it as a list item's text continued."""
    mark = CONTINUED.match(shown)
    return len("".join(mark.group().split())) if mark else 0


def _read(parts: list[str]) -> list[tuple[str, frozenset[str]]]:
    """What the parts show, one after another, each character with its formatting; the
    white space at the cuts, and the marks of a list item continued, left out."""
    read = []
    for part in parts:
        chars = [(char, form) for char, form in formatted_chars(part) if not char.isspace()]
        read += chars[_continued(visible_text(part)) if read else 0:]
    return read


def _whole(text: str) -> list[tuple[str, frozenset[str]]]:
    (whole,) = _telegram(text, 10**6)
    return _read([whole])


_WORDS = " ".join(f"word{n}" for n in range(30))
CUT_SPANS = (f"Start **{_WORDS}** then *{_WORDS}* and ~~{_WORDS}~~, `{_WORDS}` and "
             f"[{_WORDS}](https://example.com/a_b?c=1&d=2) or [{_WORDS}][ref] end.\n\n[ref]: https://ref.example/x")


def test_emphasis_code_and_a_link_cut_over_telegram_parts_read_formatted_in_each():
    parts = _telegram(CUT_SPANS, 80)
    assert len(parts) > 10
    assert _read(parts) == _whole(CUT_SPANS)
    for part in parts:
        assert not any(marker in visible_text(part) for marker in ("**", "~~", "`", "](", "]["))


def test_a_discord_part_cut_inside_emphasis_or_a_link_is_markdown_that_reads_as_the_whole_did():
    discord = adapter_for("discord")
    parts = reply_parts(CUT_SPANS, style=discord.style, limit=80, size=discord.length, markdown=True)
    assert all(discord.length(part) <= 80 for part in parts)
    assert _read([TELEGRAM_HTML.markdown(part, {"references": {"REF": {"href": "https://ref.example/x", "title": ""}}})
                  for part in parts]) == _whole(CUT_SPANS)


def test_a_line_of_mixed_stars_and_underscores_is_no_rule_and_is_cut_where_its_parts_are_full():
    """"_*_*_…" mixes its markers: Markdown reads no rule in it, so a part may begin with it.
    Taken for a rule, every cut was refused back to the piece's start, each refusal reading
    the line to its end: 4,001 characters on Discord were 5 parts, two of them 2 and 62
    characters long."""
    discord = adapter_for("discord")
    text = "*_" * 1000 + "x" + "_*" * 1000
    parts = reply_parts(text, style=discord.style, limit=2000, size=discord.length, markdown=True)
    assert len(parts) == 3
    assert all(discord.length(part) <= 2000 for part in parts)


def test_a_link_is_never_cut_inside_its_address():
    slack = adapter_for("slack")
    address = "https://example.com/" + "/".join(f"segment{n}" for n in range(8))
    text = " ".join(f"see [the long label number {n}]({address})" for n in range(12))
    parts = reply_parts(text, style=slack.style, limit=150, size=slack.length, markdown=True)
    assert all(slack.length(part) <= 150 for part in parts)
    assert sum(part.count(f"<{address}|") for part in parts) >= 12
    assert all(part.count("<") == part.count(f"<{address}|") for part in parts)


def test_an_ordered_list_numbered_one_on_every_item_continues_its_numbering_in_the_next_part():
    text = "Steps:\n\n" + "\n".join(f"1. do step {n} of the plan" for n in range(1, 31)) + "\n\nDone."
    parts = _telegram(text, 120)
    assert len(parts) > 3
    numbers = [int(line.split(".")[0]) for part in parts for line in visible_text(part).splitlines()
               if line[:1].isdigit()]
    assert numbers == list(range(1, 31))
    discord = adapter_for("discord")
    written = reply_parts(text, style=discord.style, limit=120, size=discord.length, markdown=True)
    shown_numbers = [int(line.split(".")[0]) for part in written
                     for line in visible_text(TELEGRAM_HTML.markdown(part)).splitlines() if line[:1].isdigit()]
    assert shown_numbers == list(range(1, 31))


def test_a_list_item_cut_inside_its_text_keeps_the_next_items_numbers():
    text = "\n".join(f"1. step {n}: " + " ".join(["and then some more"] * 4) for n in range(1, 9))
    parts = _telegram(text, 70)
    assert _read(parts) == _whole(text)


# Prose the model writes: words, formatted spans, links and lists, in paragraphs.
_word = st.sampled_from(["alpha", "beta", "gamma", "d", "é", "😀", "my_file", r"2\*3", "a&b", "x<y"])
_words = st.lists(_word, min_size=1, max_size=12).map(" ".join)
_span = st.one_of(_word, _words.map("**{}**".format), _words.map("*{}*".format), _words.map("_{}_".format),
                  _words.map("~~{}~~".format), _words.map("`{}`".format),
                  _words.map("[{}](https://example.com/p_q?a=1&b=2)".format),
                  st.tuples(_words, _words).map(lambda w: f"**{w[0]} *{w[1]}* {w[0]}**"))
_line = st.lists(_span, min_size=1, max_size=10).map(" ".join)
_block = st.one_of(st.lists(_line, min_size=1, max_size=4).map("\n".join),
                   st.lists(_line, min_size=1, max_size=8).map(lambda items: "\n".join(f"1. {i}" for i in items)),
                   st.lists(_line, min_size=1, max_size=8).map(lambda items: "\n".join(f"- {i}" for i in items)),
                   _line.map("# {}".format))
prose = st.lists(_block, min_size=1, max_size=6).map("\n\n".join)


@settings(max_examples=200, deadline=None)
@given(prose, st.integers(min_value=30, max_value=300))
@example(CODE_ENDING_IN_A_SPACE, 40)
@example(CODE_OVER_LINES, 40)
@example(LABEL_BEGUN_WITH_A_SPACE, 40)
@example(TICKS_AFTER_A_HARD_CUT, 65)
@example(HEADING_CUT_AFTER_A_HASH, 40)
@example(CODE_CLOSED_AT_A_LINES_START, 40)
@example(CODE_OVER_A_LINE_OF_TICKS, 17)
@example(BLANK_AFTER_A_HARD_CUT, 17)
@example(NESTED_IN_A_QUOTE, 30)
@example(NESTED_NUMBERED, 30)
@example(RULE_AFTER_A_CUT, 16)
@example("__ __ __ __ alpha __ __ " + "x" * 26, 16)
@example(RULE_CHARACTERS_IN_AN_ITEM, 15)
@example("> 1. __ __ __ __ __ __ alpha " + "x" * 26, 19)
@example(ITEM_BEGUN_WITH_A_NESTED_LIST, 40)
@example(DASH_ON_AN_INDENTED_LINE, 45)
@example(QUOTE_IN_AN_ITEM, 60)
@example(CUT_IN_AN_INDENT, 14)
@example("alpha\n1. alpha alpha alpha alpha\n1. > alpha alpha", 40)
@example("alpha alpha alpha alpha\n    - alpha", 14)
@example(WIDE_ITEM_GAP, 40)
def test_a_reply_cut_over_telegram_parts_reads_as_the_whole_did(text, limit):
    parts = _telegram(text, limit)
    assert all(_utf16(visible_text(part)) <= limit for part in parts)
    assert _read(parts) == _whole(text)


@settings(max_examples=100, deadline=None)
@given(prose, st.integers(min_value=60, max_value=300))  # a link as written fits in a part
@cuts_found_before
def test_a_reply_cut_over_discord_parts_is_markdown_that_reads_as_the_whole_did(text, limit):
    discord = adapter_for("discord")
    parts = reply_parts(text, style=discord.style, limit=limit, size=discord.length, markdown=True)
    assert all(discord.length(part) <= limit for part in parts)
    # Backticks in code keep a zero-width space between (styles.fence_proof), which nobody sees.
    read = [(char, form) for char, form in _read([TELEGRAM_HTML.markdown(part) for part in parts]) if char != "\u200b"]
    assert read == _whole(text)


# Words apart (a word longer than a part is cut where no space is), tables among them.
spaced = st.lists(st.sampled_from(_PIECES), max_size=120).map(" ".join)
# A table cut over parts shows its header ("a | b", in bold) again in each later part, and a row wider
# than a part is shown as its cells, each after its column's name ("a: …"), without the "|" between them.
# Only a header shown as one is left out: "| a | b |" that is no table (its rule has another number of
# columns) is text, and a cut between its "a" and its "b" once read as text lost (the "a|b" left out whole).
_TABLE_HEADER = "<b>a | b</b>"
_TABLE_WRITTEN = re.compile(r"\||[ab]:")


@settings(max_examples=150, deadline=None)
@given(spaced, st.integers(min_value=40, max_value=300))
@cuts_found_before
@example(TICKS_BEGINNING_A_PIECE, 14)  # Discord's parts show the backticks: 14 holds no inline code of 16
@example(TICKS_ESCAPED_TWICE, 16)
@example(TICKS_BEFORE_A_LONG_WORD, 16)
@example(BOLD_CUT_BEFORE_A_LINE_BREAK, 16)
@example(RULE_BEGINNING_A_PART, 16)
@example(MARKER_ALONE, 16)
@example(ITEM_READ_AS_A_RULE, 40)
@example(NESTED_ITEM_READ_AS_A_RULE, 40)
@example(CODE_AFTER_DEEP_NESTING, 40)
@example("| a | b |\n|---|---|\n" + "| word x | é |\n" * 8 + "> | a | b |\n> |---|---|\n" + "> | **x** | word |\n" * 8, 40)
@example("| a | b |\n|---|---|\n| " + "word " * 12 + "| x |\n| é | x |", 40)  # a row wider than a part
@example("** ** ** | a | b |\n|---|---|\n", 14)  # no table: its "a" and "b" cut apart, text in both parts
@example("x " + "~" * 100, 40)  # each part after the first began "~~~", an empty code block, left out
@example("> x " + "~" * 100, 40)
@example("x " + "_" * 100, 40)  # each part after the first showed a rule ("———")
# No table (three columns over two): cut before "a", the next part was one ("a | b" bold, "|---|---|" not shown).
@example("** ** ** ```python\n ** ** ** ** ** ** | a | b |\n|---|---|\n", 40)
# No table (two columns over five): cut inside the row, the first part ended in one ("|---|---|" not shown).
@example("| a | b |\n|---|---| ---|---|---|---|---|", 24)
def test_whatever_the_model_wrote_its_telegram_parts_show_the_text_it_shows_whole(text, limit):
    parts = _telegram(text, limit)
    (whole,) = _telegram(text, 10**6)

    def read(markup: str) -> str:  # a quote in a quote shows "> " on each of its lines: a cut adds one
        return _TABLE_WRITTEN.sub("", "".join(visible_text(markup.replace(_TABLE_HEADER, "")).replace(">", "").split()))

    shown = [read(part)[_continued(visible_text(part).replace(">", "")) if n else 0:] for n, part in enumerate(parts)]
    assert "".join(shown) == read(whole)


@pytest.mark.parametrize("kind", ["telegram", "slack", "whatsapp", "sms"])  # Discord's: read above
def test_a_line_begun_with_three_backticks_cut_over_parts_keeps_all_its_text(kind):
    adapter = adapter_for(kind)
    parts = reply_parts(TICKS_OPENING_A_LINE, style=adapter.style, limit=40, size=adapter.length, markdown=True)
    letters = re.findall(r"\w", "".join(visible_text(part) if kind == "telegram" else shown(part) for part in parts))
    assert letters == re.findall(r"\w", TICKS_OPENING_A_LINE)  # none lost (the cut may fall inside a word)


# Discord shows the backticks: no part of 15 characters holds the inline code whole.
@pytest.mark.parametrize("kind", ["telegram", "slack", "whatsapp", "sms"])
@pytest.mark.parametrize("limit", [14, 15])
def test_three_backticks_beginning_a_part_in_a_line_of_text_stay_text(kind, limit):
    adapter = adapter_for(kind)
    parts = reply_parts(TICKS_BEGINNING_A_PIECE, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    assert len(parts) > 1
    if kind == "telegram":  # "python " as code, then "```python" as text
        assert _read(parts) == _whole(TICKS_BEGINNING_A_PIECE)
    else:
        (whole,) = reply_parts(TICKS_BEGINNING_A_PIECE, style=adapter.style, limit=4000, size=adapter.length,
                               markdown=True)
        # The inline code before them may be cut in two (each piece between its own backticks).
        assert "".join("".join(shown(part).split()) for part in parts).replace("`", "") == (
            "".join(shown(whole).split()).replace("`", ""))
        assert shown(parts[-1]).endswith("```python")  # as text, no code block


OURS = "Use *stars*, _under_ or ~tilde~ and `ticks` in my_file_name.txt, 2 * 3 and a*b*c, cron */5 * * * *"


@pytest.mark.parametrize("kind", ["whatsapp", "slack"])
def test_text_of_ours_with_formatting_characters_shows_them_literally_on_whatsapp_and_slack(kind):
    adapter = adapter_for(kind)
    (part,) = reply_parts(OURS, style=adapter.style, limit=4000, size=adapter.length, markdown=False)
    assert formatted(part) == []
    assert shown(part) == OURS
    assert "my_file_name.txt" in part and "a*b*c" in part  # inside a word: left as it is


@pytest.mark.parametrize("kind", ["whatsapp", "slack"])
def test_the_models_literal_formatting_characters_stay_literal_and_its_formatting_formats(kind):
    adapter = adapter_for(kind)
    text = r"A \*literal\* star, \_this\_, \~that\~, \`tick\` and my_file_name.txt, then **bold** and *it*."
    (part,) = reply_parts(text, style=adapter.style, limit=4000, size=adapter.length, markdown=True)
    assert formatted(part) == ["*bold*", "_it_"]
    assert shown(part) == "A *literal* star, _this_, ~that~, `tick` and my_file_name.txt, then *bold* and _it_."


TABLE = "Prices:\n\n| item | price |\n|---|---|\n" + "".join(f"| thing number {n} | {n}.50 € |\n" for n in range(40)) + "\nThat's all."


def test_a_table_cut_over_telegram_parts_begins_each_part_with_its_header_again():
    parts = _telegram(TABLE, 300)
    shown_parts = [visible_text(part) for part in parts]
    tabled = [(part, text) for part, text in zip(parts, shown_parts, strict=True) if "thing number" in text]
    assert len(tabled) >= 3
    for part, text in tabled:
        assert text.lstrip().startswith("item | price") or text.startswith("Prices:")
        assert "<b>item | price</b>" in part  # as the whole table shows its header: bold
    rows = [line for text in shown_parts for line in text.splitlines() if line.startswith("thing number")]
    assert rows == [f"thing number {n} | {n}.50 €" for n in range(40)]  # every row once, in order


@pytest.mark.parametrize("kind", ["slack", "whatsapp", "sms"])
def test_a_table_cut_over_parts_shows_its_header_first_in_each_later_part(kind):
    adapter = adapter_for(kind)
    parts = reply_parts(TABLE, style=adapter.style, limit=300, size=adapter.length, markdown=True)
    later = [shown(part) for part in parts[1:] if "thing number" in part]
    assert len(later) >= 2
    assert all(part.startswith(("*item | price*", "item | price")) for part in later)


def test_a_table_cut_over_discord_parts_is_a_markdown_table_in_each():
    discord = adapter_for("discord")
    parts = reply_parts(TABLE, style=discord.style, limit=300, size=discord.length, markdown=True)
    tabled = [part for part in parts if "thing number" in part]
    assert len(tabled) >= 3
    for part in tabled:
        table = part[part.index("| item"):] if "| item" in part else part
        assert table.startswith("| item | price |\n|---|---|\n")
        assert "<table>" in __import__("markdown_it").MarkdownIt("commonmark").enable("table").render(table)


LONG_HEADER = ("| name of the first column | name of the second column |\n|---|---|\n"
               + "".join(f"| row {n} left | row {n} right |\n" for n in range(12)))


@pytest.mark.parametrize("kind", ["telegram", "slack", "whatsapp", "discord"])
def test_a_table_whose_header_takes_much_of_a_part_shows_it_first_in_every_part(kind):
    """The header was written again only where it took at most half of what was left of the
    piece being cut; after a part begun with it, less was left, and the next part's rows
    were lines of text between "|"s, under no header."""
    adapter = adapter_for(kind)
    parts = reply_parts(LONG_HEADER, style=adapter.style, limit=150, size=adapter.length, markdown=True)
    seen = [visible_text(part) if kind == "telegram" else shown(part) for part in parts]
    assert len(seen) >= 3
    for part in seen:
        assert part.lstrip("*|_ ").startswith("name of the first column"), part
        assert adapter.length(part if kind != "telegram" else visible_text(part)) <= 150
    rows = [re.sub(r"[|*_ ]+", " ", line).strip() for part in seen for line in part.splitlines() if "row" in line]
    assert rows == [f"row {n} left row {n} right" for n in range(12)]  # every row once, in order


_ROWS = "".join(f"| thing number {n} | {n}.50 € |\n" for n in range(12))
QUOTED_TABLE = "> | item | price |\n> |---|---|\n" + _ROWS.replace("| thing", "> | thing")
LISTED_TABLE = "- list:\n\n  | item | price |\n  |---|---|\n" + _ROWS.replace("| thing", "  | thing")


@pytest.mark.parametrize("text", [QUOTED_TABLE, LISTED_TABLE])
def test_a_table_in_a_quote_or_a_list_item_cut_over_parts_shows_its_header_first_in_each(text):
    parts = [visible_text(part) for part in _telegram(text, 120)]
    assert len(parts) >= 3
    for part in parts[1:]:
        assert re.sub(r"^(?:• …\n)?", "", part).startswith("item | price"), part  # after "• …" in a list item
    rows = [line.strip() for part in parts for line in part.splitlines() if "thing number" in line]
    assert rows == [f"thing number {n} | {n}.50 €" for n in range(12)]  # rows of a table: no stray "|"


WIDE_ROW = "| a | b |\n|---|---|\n| " + "x" * 55 + " | y |"
WIDE_ROWS = ("| name | note |\n|---|---|\n| short | one |\n| long | " + " ".join(f"word{n}" for n in range(20))
             + " |\n| last | two |")


@pytest.mark.parametrize("kind", ["telegram", "slack", "whatsapp", "discord", "sms"])
@pytest.mark.parametrize(("text", "limit"), [(WIDE_ROW, 30), (WIDE_ROWS, 60), (TABLE.replace("thing number 7", "thing " * 60), 300)])
def test_a_table_row_wider_than_a_part_shows_its_cells_as_lines_and_no_stray_pipes(kind, text, limit):
    """A row cut over parts would show its pieces between literal "|"s: it is shown as its
    cells, each on a line after its column's header ("b: y"), the rows around it as a table."""
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    shown_parts = [shown(visible_text(part) if kind == "telegram" else part) for part in parts]
    assert all(adapter.length(part) <= limit for part in parts)
    rows = [line.strip() for line in text.splitlines() if line.startswith("|") and "---" not in line]
    whole_rows = {*rows, *(" | ".join(cell.strip() for cell in row.strip("|").split("|")) for row in rows)}
    lines = [line.strip(" *") for part in shown_parts for line in part.splitlines()]
    assert all(line in whole_rows or line == "|---|---|" for line in lines if "|" in line), lines
    words, at = "".join("".join(part.split()) for part in shown_parts), 0
    for cell in ("".join(cell.split()) for row in rows[1:] for cell in row.strip("|").split("|")):
        at = words.index(cell, at) + len(cell)  # every cell, in order


LONG_ITEMS = ("Steps:\n\n1. Open the settings.\n2. " + " ".join(f"then check box {n}" for n in range(40))
              + ".\n3. Save.\n\n- one\n- " + " ".join(f"and bullet word {n}" for n in range(40)) + "\n- two")


@pytest.mark.parametrize("kind", ["telegram", "slack", "whatsapp", "sms"])
def test_a_list_items_text_cut_over_parts_goes_on_as_that_item_marked_as_continued(kind):
    adapter = adapter_for(kind)
    parts = reply_parts(LONG_ITEMS, style=adapter.style, limit=200, size=adapter.length, markdown=True)
    texts = [shown(visible_text(part) if kind == "telegram" else part) for part in parts]
    numbered = [text for text in texts if "then check box" in text and "Open the settings" not in text]
    bulleted = [text for text in texts if "and bullet word" in text and "one" not in text]
    assert len(numbered) >= 2 and len(bulleted) >= 2
    assert all(text.startswith("2. …") for text in numbered)  # item 2, continued
    assert all(text.startswith("• …") for text in bulleted)
    items = [line.split(".")[0] for text in texts for line in text.splitlines() if line[:1].isdigit()]
    assert items == ["1", "2"] + ["2"] * len(numbered) + ["3"]


@pytest.mark.parametrize("text", [RULE_IN_A_LIST_ITEM, "> " + RULE_IN_A_LIST_ITEM, "- " + RULE_IN_A_LIST_ITEM])
def test_a_list_items_text_that_alone_would_be_a_rule_is_not_cut_after(text):
    parts = _telegram(text, 40)
    assert len(parts) > 1
    assert _read(parts) == _whole(text)  # "__ __" as text in every part, no rule


NESTED_ITEMS = ("- top item\n  - " + " ".join(f"sub{n}" for n in range(30)) + "\n  - next sub\n- last\n\n"
                "1. one\n   1. " + " ".join(f"deep{n}" for n in range(30)) + "\n   2. two deep\n2. two")
SHORT_NESTED_ITEMS = "- alpha beta\n  - alpha gamma\n  - alpha delta\n- after"
# Nested by a tab (CommonMark's tab stops are four columns): the next part wrote its marker one column in.
# Nested under an item numbered "1." that a later part writes "11.": at its three columns the nested item
# was no longer in it there (a wider number needs four).
NESTED_UNDER_ITEM_ELEVEN = ("\n".join(f"1. step {n} of the plan" for n in range(1, 11))
                            + "\n1. step eleven\n   - sub point one\n   - sub point three\n1. last")
TAB_NESTED_ITEMS = "- top item\n\t- " + " ".join(f"sub{n}" for n in range(12)) + "\n\t- next sub\n- last"


@pytest.mark.parametrize(("text", "limit"), [(NESTED_ITEMS, 80), (SHORT_NESTED_ITEMS, 24), ("> " + SHORT_NESTED_ITEMS.replace("\n", "\n> "), 26),
                                             (NESTED_NUMBERED, 30), (TAB_NESTED_ITEMS, 30),
                                             (NESTED_UNDER_ITEM_ELEVEN, 40), (NESTED_UNDER_ITEM_ELEVEN, 60)])
@pytest.mark.parametrize("kind", ["telegram", "discord"])
def test_a_nested_list_item_cut_over_parts_goes_on_at_its_level(kind, text, limit):
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    shown = [visible_text(part if kind == "telegram" else TELEGRAM_HTML.markdown(part)) for part in parts]
    lines = [line for part in shown for line in part.splitlines() if line.strip() not in ("• …", "1. …")]
    nested = [line for line in lines if re.search(r"sub|deep|gamma|delta", line)]
    assert len(nested) >= 2 and len(parts) >= 2
    assert all(re.match(r"   (?:•|\d\.) ", line) for line in nested), lines  # nested, as they were
    assert not any(line.startswith(" ") for line in lines if re.search(r"last|after|two$", line))
    assert [line for line in nested if "…" in line] == [line for line in nested if re.match(r"   (?:•|1\.) …", line)]
    assert _read(parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts]) == _whole(text)


@pytest.mark.parametrize("text", [ITEM_BEGUN_WITH_A_NESTED_LIST, "> " + ITEM_BEGUN_WITH_A_NESTED_LIST.replace("\n", "\n> "),
                                  ITEM_BEGUN_WITH_A_QUOTE])
@pytest.mark.parametrize("kind", ["telegram", "discord", "slack", "whatsapp"])
def test_a_list_item_begun_with_a_nested_list_cut_before_its_line_keeps_its_number(kind, text):
    """A cut before "1. - alpha" (or "1. > epsilon") begins the next part with the item itself, numbered as it
    was, not with the item marked as continued ("1. …") above it numbered on as the next."""
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=40, size=adapter.length, markdown=True)
    assert len(parts) > 1 and all(adapter.length(adapter.style.visible(part)) <= 40 for part in parts), parts
    shown_parts = [visible_text(part) if kind == "telegram" else visible_text(TELEGRAM_HTML.markdown(part))
                   if kind == "discord" else part for part in parts]  # Discord's numbers, as Markdown reads them
    shown_parts = [part.replace("&gt;", ">") for part in shown_parts]  # Slack's quotes
    numbers = [line.lstrip("> ")[:2] for part in shown_parts for line in part.splitlines()
               if re.match(r"[> ]*\d\.", line) and "…" not in line]
    assert numbers == ["1.", "2."], parts
    if kind in ("telegram", "discord"):
        assert _read(parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts]) == _whole(text)


@pytest.mark.parametrize("kind", ["telegram", "discord", "slack", "whatsapp"])
def test_a_list_item_continued_in_a_later_part_keeps_the_column_its_text_was_at(kind):
    adapter = adapter_for(kind)
    parts = reply_parts(WIDE_ITEM_GAP, style=adapter.style, limit=40, size=adapter.length, markdown=True)
    assert len(parts) > 1 and all(adapter.length(adapter.style.visible(part)) <= 40 for part in parts), parts
    shown_parts = [visible_text(part) if kind == "telegram" else visible_text(TELEGRAM_HTML.markdown(part))
                   if kind == "discord" else part for part in parts]
    (last,) = [line for part in shown_parts for line in part.splitlines() if line.endswith(". alpha")]
    assert last == "3. alpha", shown_parts  # the list's third item, at the top level
    if kind in ("telegram", "discord"):
        assert _read(parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts]) == _whole(
            WIDE_ITEM_GAP)


@pytest.mark.parametrize("kind", ["telegram", "discord", "slack", "whatsapp"])
@pytest.mark.parametrize("limit", [30, 45])
def test_a_dash_beginning_an_indented_line_of_a_paragraph_stays_a_dash_in_the_parts(kind, limit):
    adapter = adapter_for(kind)
    parts = reply_parts(DASH_ON_AN_INDENTED_LINE, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    shown_parts = [visible_text(part) if kind == "telegram" else TELEGRAM_HTML.markdown(part) if kind == "discord"
                   else part for part in parts]
    assert len(parts) > 1 and all(adapter.length(adapter.style.visible(part)) <= limit for part in parts), parts
    assert not any("•" in part or "<li>" in part for part in shown_parts), shown_parts
    assert "".join("".join(part.split()) for part in shown_parts).replace("<p>", "").replace("</p>", "") == "".join(
        DASH_ON_AN_INDENTED_LINE.split())


@pytest.mark.parametrize(("text", "limit"), [(QUOTE_IN_AN_ITEM, 60), ("> " + QUOTE_IN_AN_ITEM.replace("\n", "\n> "), 60),
                                             (QUOTED_CODE_IN_AN_ITEM, 45)])
@pytest.mark.parametrize("kind", ["telegram", "discord", "slack", "whatsapp"])
def test_a_quote_in_a_list_item_cut_over_parts_goes_on_in_the_item(kind, text, limit):
    """Each later part goes on with the item marked as continued, the quote in it (its text,
    or its code), so what is nested in the item after the quote is still nested there."""
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    shown_parts = [visible_text(part) if kind == "telegram" else visible_text(TELEGRAM_HTML.markdown(part))
                   if kind == "discord" else part.replace("&gt;", ">") for part in parts]
    assert len(parts) > 2 and all(adapter.length(adapter.style.visible(part)) <= limit for part in parts), parts
    noted = [part for part in shown_parts[1:] if re.search(r"long enough|cut\.|sub point|line t", part)]
    assert len(noted) >= 2 and all(re.match(r"[> ]*1\. …", part) for part in noted), shown_parts
    (sub,) = [line for part in shown_parts for line in part.splitlines() if "sub point" in line]
    assert re.match(r"[> ]*   • a sub point", sub), shown_parts
    if kind in ("telegram", "discord"):
        read = _read(parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts])

        def unquoted(read):  # a quote in a quote shows "> " on each of its lines: a cut adds one
            return [(char, form) for char, form in read if not (char == ">" and "blockquote" in form)]

        assert unquoted(read) == unquoted(_whole(text))


@pytest.mark.parametrize("limit", [35, 40, 45, 50, 60])
@pytest.mark.parametrize("kind", ["telegram", "discord", "slack", "whatsapp"])
def test_a_part_begun_at_the_fence_of_a_code_block_in_a_quote_in_a_list_item_goes_on_in_the_item(kind, limit):
    """Cut before the code block's opening fence, the next part begins with the item marked as
    continued, the quoted code in it, as a part cut inside the code does."""
    adapter = adapter_for(kind)
    parts = reply_parts(QUOTED_CODE_IN_AN_ITEM, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    shown_parts = [visible_text(part) if kind == "telegram" else visible_text(TELEGRAM_HTML.markdown(part))
                   if kind == "discord" else part.replace("&gt;", ">") for part in parts]
    assert all(adapter.length(adapter.style.visible(part)) <= limit for part in parts), parts
    coded = [part for part in shown_parts if "code" in part and not part.startswith("1. Step")]
    assert coded and all(re.match(r"[> ]*1\. …", part) for part in coded), shown_parts


@pytest.mark.parametrize(("kind", "limit"), [(kind, limit) for kind in ("telegram", "slack", "whatsapp") for limit in (12, 14, 16)]
                         + [("discord", limit) for limit in (18, 20, 22)])  # shown as written: "  - …" takes more
def test_a_cut_never_falls_inside_the_indent_of_a_nested_items_line_nor_after_its_marker(kind, limit):
    """Where no space is left to cut at but those of a nested item's indent or the one after
    its marker, the cut falls in its text: the next part does not begin four columns in
    (code), nor is the item left empty, its text out of it."""
    adapter = adapter_for(kind)
    parts = reply_parts(CUT_IN_AN_INDENT, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    markup = parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts] if kind == "discord" else []
    assert all(adapter.length(adapter.style.visible(part)) <= limit for part in parts), parts
    assert not any("```" in part or "<pre>" in part for part in [*parts, *markup]), parts  # no code
    assert not any(re.search(r"\d\.\Z", part) for part in parts), parts  # no empty item
    if markup:
        assert _read(markup) == _whole(CUT_IN_AN_INDENT)


def test_a_list_items_text_cut_over_discord_parts_is_that_item_again_in_markdown():
    discord = adapter_for("discord")
    parts = reply_parts(LONG_ITEMS, style=discord.style, limit=200, size=discord.length, markdown=True)
    later = [part for part in parts if part.startswith(("2. …", "- …"))]
    assert len(later) >= 2
    for part in later:
        assert "<li>" in __import__("markdown_it").MarkdownIt("commonmark").render(part).split("\n")[1]


@pytest.mark.parametrize("kind", ["telegram", "slack", "whatsapp", "discord"])
def test_inline_code_after_items_nested_so_deep_their_continuation_nearly_fills_a_part_is_never_split(kind):
    """Items nested four deep go on in a later part under four "…" lines, which leave a 40
    character part room for less than the code: it is not split into lone backticks, and
    every part stays within the limit."""
    adapter = adapter_for(kind)
    parts = reply_parts(CODE_AFTER_DEEP_NESTING, style=adapter.style, limit=40, size=adapter.length, markdown=True)
    assert all(adapter.length(adapter.style.visible(part)) <= 40 for part in parts), parts
    read = parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts] if kind == "discord" else None
    if read is not None:
        assert _read(read) == _whole(CODE_AFTER_DEEP_NESTING), parts
    else:  # the code, a space, shown once between its backticks, never a backtick alone in a part
        shown_parts = [shown(part) for part in parts]
        assert sum(part.count("` `") for part in shown_parts) == 1, parts
        assert "`" not in "".join(shown_parts).replace("` `", ""), parts


@pytest.mark.parametrize("text", [CODE_OVER_A_LINE_OF_TICKS, BLANK_AFTER_A_HARD_CUT])
@pytest.mark.parametrize("limit", [13, 17, 24])
def test_inline_code_over_lines_whose_second_begins_with_three_backticks_is_code_in_every_part(text, limit):
    parts = _telegram(text, limit)
    assert len(parts) > 1
    assert _read(parts) == _whole(text)  # every character, as code
    assert all("`" not in visible_text(part).replace("```word", "") for part in parts)


@pytest.mark.parametrize("kind", ["telegram", "discord", "slack", "whatsapp"])
@pytest.mark.parametrize("text", [FAMILY_CUT_IN_TWO, f"**{FAMILY * 30}**", "`" + "e\u0301" * 50 + "` **x**"])
def test_a_cut_where_no_space_is_falls_between_characters_as_people_see_them(kind, text):
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=20, size=adapter.length, markdown=True)
    assert len(parts) > 1
    whole = set(regex.findall(r"\X", text))
    for part in parts:
        shown = visible_text(part) if kind == "telegram" else part
        assert all(char.isascii() or char in whole for char in regex.findall(r"\X", shown)), part


@pytest.mark.parametrize("kind", ["slack", "whatsapp"])
def test_a_backtick_inside_inline_code_on_slack_and_whatsapp_stays_inside_the_code(kind):
    adapter = adapter_for(kind)
    (part,) = reply_parts("Type `` a` b `` then `c`.", style=adapter.style, limit=4000, size=adapter.length,
                          markdown=True)
    assert formatted(part) == ["`aˋ b`", "`c`"]  # one code span each, the inner backtick a look-alike


_CODE = [f"x{n} = a + b  # line {n}" for n in range(12)]
QUOTED_CODE = "> Look:\n>\n> ```py\n" + "".join(f"> {line}\n" for line in _CODE) + "> ```\n\nAfter."
LISTED_CODE = "- Look:\n\n  ```py\n" + "".join(f"  {line}\n" for line in _CODE) + "  ```\n- next"
NUMBERED_CODE = "1. one\n2. Look:\n\n   ```py\n" + "".join(f"   {line}\n" for line in _CODE) + "   ```\n3. next"
QUOTED_LISTED_CODE = "> - Look:\n>\n>   ```py\n" + "".join(f">   {line}\n" for line in _CODE) + ">   ```\n> - next"


@pytest.mark.parametrize("text", [QUOTED_CODE, LISTED_CODE, NUMBERED_CODE, QUOTED_LISTED_CODE])
@pytest.mark.parametrize("kind", ["telegram", "discord"])
def test_a_code_block_in_a_quote_or_a_list_item_cut_over_parts_is_code_in_its_quote_or_item_in_each(kind, text):
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=150, size=adapter.length, markdown=True)
    assert len(parts) >= 2  # Telegram shows neither the fences nor the markers: fewer parts
    assert all(adapter.length(visible_text(part) if kind == "telegram" else part) <= 150 for part in parts)
    read = _read(parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts])
    assert read == _whole(text)  # every line once, as code, in its quote
    if kind == "discord":  # Markdown: each piece of the code a code block where the whole's was, in its item
        md = __import__("markdown_it").MarkdownIt("commonmark")
        (level,) = {t.level for t in md.parse(text) if t.type == "fence"}
        fences = [t for part in parts for t in md.parse(part) if t.type == "fence"]
        assert all(t.level == level and t.info == "py" for t in fences), parts
        assert "".join(t.content for t in fences).splitlines() == _CODE


@pytest.mark.parametrize("text", [QUOTED_CODE, QUOTED_LISTED_CODE])
@pytest.mark.parametrize("kind", ["slack", "whatsapp"])
def test_a_code_block_in_a_quote_cut_over_parts_is_quoted_code_in_each(kind, text):
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=150, size=adapter.length, markdown=True)
    assert len(parts) >= 3 and all(adapter.length(part) <= 150 for part in parts)
    found = []
    for part in parts:
        lines = part.split("\n")
        code = [n for n, line in enumerate(lines) if "x" in line and "= a + b" in line]
        if not code:
            continue
        found += [lines[n].split("x", 1)[1].removesuffix("```") for n in code]
        assert all(lines[n].startswith(("&gt; ", "> ")) for n in code), part  # quoted
        ticks = [n for n, line in enumerate(lines) if "```" in line]
        assert ticks and ticks[0] <= code[0] and ticks[-1] >= code[-1], part  # between its fences
    assert found == [line[1:] for line in _CODE]


# Its first character ">" was read as a quote's marker, and written again before each later piece's code.
CODE_BEGUN_WITH_A_GREATER_THAN = "     > " + "c" * 30


@pytest.mark.parametrize("text", ["    " + "a" * 24 + "\n    " + "b" * 30, "> x\n>\n>     " + "a" * 24,
                                  CODE_BEGUN_WITH_A_GREATER_THAN, "> x\n>\n" + "> " + CODE_BEGUN_WITH_A_GREATER_THAN])
@pytest.mark.parametrize("kind", ["telegram", "discord"])
def test_a_line_of_indented_code_longer_than_a_part_is_code_in_each(kind, text):
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=16, size=adapter.length, markdown=True)
    assert len(parts) >= 3
    assert _read(parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts]) == _whole(text)


_SNIPPETS = [line for n in range(15) for line in ("```python", f"print({n})  # example number {n}", "```")]
FOUR_TICKS = "Here is markdown:\n\n````markdown\n" + "\n".join(_SNIPPETS) + "\n````\n\nDone."
QUOTED_FOUR_TICKS = "> ````markdown\n" + "".join(f"> {line}\n" for line in _SNIPPETS) + "> ````\n\nDone."


@pytest.mark.parametrize("text", [FOUR_TICKS, QUOTED_FOUR_TICKS])
def test_a_code_block_fenced_with_four_backticks_holding_three_cut_over_discord_parts_is_one_block_in_each(text):
    """Discord's client reads no longer fence (chat_markers.code_blocks): each part shows one
    block, which its ``` lines do not end, its quote's markers read first."""
    discord = adapter_for("discord")
    parts = reply_parts(text, style=discord.style, limit=200, size=discord.length, markdown=True)
    unquoted = ["\n".join(line.removeprefix(">").removeprefix(" ") for line in part.split("\n")) for part in parts]
    read = [code_blocks(part, languages=True) for part in unquoted]
    assert sum(1 for blocks, _ in read if blocks) >= 3
    assert all(len(blocks) <= 1 and "`" not in outside for blocks, outside in read), parts
    assert [line for blocks, _ in read for block in blocks for line in block.split("\n")] == _SNIPPETS
    assert all(discord.length(part) <= 200 for part in parts)


def test_a_code_block_fenced_with_tildes_is_sent_to_discord_with_backticks_which_it_reads():
    discord = adapter_for("discord")
    (part,) = reply_parts("Run:\n\n~~~sh\nls ~\n~~~", style=discord.style, limit=2000, size=discord.length,
                          markdown=True)
    assert code_blocks(part, languages=True) == (["ls ~"], "Run:\n\n")


QUOTED_WIDE_ROWS = "\n".join(f"> {line}" for line in WIDE_ROWS.split("\n")) + "\n\nAfter."
LISTED_WIDE_ROWS = "- list:\n\n" + "\n".join(f"  {line}" for line in WIDE_ROWS.split("\n")) + "\n- after"
ITEM_OF_WIDE_ROWS = "1. " + WIDE_ROWS.replace("\n", "\n   ") + "\n2. after"


@pytest.mark.parametrize("kind", ["telegram", "slack", "whatsapp", "discord", "sms"])
@pytest.mark.parametrize("text", [QUOTED_WIDE_ROWS, LISTED_WIDE_ROWS, ITEM_OF_WIDE_ROWS])
def test_a_wide_row_of_a_table_in_a_quote_or_a_list_item_shows_its_cells_as_lines_in_it(kind, text):
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=60, size=adapter.length, markdown=True)
    assert all(adapter.length(visible_text(part) if kind == "telegram" else part) <= 60 for part in parts)
    shown_parts = [shown(visible_text(part) if kind == "telegram" else part) for part in parts]
    rows = {"name | note", "short | one", "last | two", "| name | note |", "| short | one |", "| last | two |",
            "|---|---|"}
    lines = [re.sub(r"^(?:&gt;|[\s>*•…]|\d\.)*", "", line).strip(" *") for part in shown_parts
             for line in part.splitlines()]
    assert all(line in rows for line in lines if "|" in line), lines  # whole rows only: no stray "|"
    words = "".join("".join(part.split()) for part in shown_parts)
    assert "long" in words and all(f"word{n}" in words for n in range(20))
    if kind in ("telegram", "discord") and text is QUOTED_WIDE_ROWS:  # the cells stay in the quote
        quoted = parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts]
        assert all(char in "After." or "blockquote" in form for char, form in _read(quoted)), parts


# Inline code between three backticks over lines: opened again at a part's start, its backticks
# would open a code block, so no cut inside it was taken and the reply was cut as plain text, its
# backticks shown and its code shown as text.
TRIPLE_TICKS_OVER_LINES = [("word ```word word \n`` ```", 14), ("`word` ``` aaaaaaaaaaaaaaaaaaaaaaaa\nword ```", 20),
                           ("** ``` ** ** ** ** ** ** | a | b |\n|---|---|\n ** ```", 20)]


@pytest.mark.parametrize(("text", "limit"), TRIPLE_TICKS_OVER_LINES)
@pytest.mark.parametrize("kind", ["telegram", "discord"])
def test_inline_code_between_three_backticks_over_lines_cut_over_parts_is_code_in_each(kind, text, limit):
    adapter = adapter_for(kind)
    parts = reply_parts(text, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    assert len(parts) >= 2
    assert all(adapter.length(visible_text(part) if kind == "telegram" else part) <= limit for part in parts)
    assert _read(parts if kind == "telegram" else [TELEGRAM_HTML.markdown(part) for part in parts]) == _whole(text)


def test_a_line_of_code_in_a_list_item_cut_where_its_rest_is_backticks_keeps_them_in_the_code():
    text = "1. ``` word word word\n   word word word ```"  # the rest alone on a line would close the block
    assert _read(_telegram(text, 20)) == _whole(text)


def test_the_last_line_of_a_code_block_in_a_list_item_that_fits_no_part_with_its_fence_is_cut_in_the_code():
    text = "- intro\n  \n  ```py\n  " + "a" * 30 + "\n  " + "a" * 30 + "\n  ```\n\nafter"
    parts = _telegram(text, 38)
    assert all(_utf16(visible_text(part)) <= 38 for part in parts)
    assert _read(parts) == _whole(text)  # every "a" as code, no backtick shown


# --- small limits -----------------------------------------------------------------------------

KINDS = ["telegram", "whatsapp", "slack", "discord", "sms", "email"]
SMALL = {
    "a code block longer than a part": "```\nprint('hello world')\nx = 1\n```",
    "a code block with its language": "```python\nprint('hello world')\nx = 1\n```",
    "a word longer than a part": "supercalifragilisticexpialidocious",
    "words": "alpha beta gamma delta epsilon zeta eta theta",
    "code with blank lines": "```\nalpha = 1\n\n\n\nbeta = 2\n```",
    "prose and code": "Intro para here.\n\n```\nline one of code\nline two of code\n```\n\nOutro words follow.",
}


def _shown(kind: str, parts: list[str]) -> str:
    """What the parts show, in order, without what cutting may add or take between them:
    spaces, line breaks, fences and the zero-width spaces that keep backticks apart."""
    style = adapter_for(kind).style
    return re.sub(r"[\s`~\u200b]", "", "".join(style.visible(part) for part in parts))


# A part that shows an empty code block: what was cut into it is lost (a fence's language).
_EMPTY_CODE = re.compile(r"\s*(```[\w+#.-]*\n\s*```|```\s*```|<pre><code[^>]*>\s*</code></pre>)\s*")


def _in_order(wanted: str, found: str) -> bool:
    rest = iter(found)
    return all(char in rest for char in wanted)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("markdown", [True, False], ids=["model", "ours"])
@pytest.mark.parametrize("name", list(SMALL))
@pytest.mark.parametrize("limit", [1, 2, 3, 5, 8, 12, 20, 40])
def test_at_any_limit_every_part_fits_shows_something_and_nothing_of_the_text_is_lost(kind, markdown, name, limit):
    """Even a part smaller than a code block's fences: the code is then cut as text."""
    adapter = adapter_for(kind)
    text = SMALL[name]
    parts = reply_parts(text, style=adapter.style, limit=limit, size=adapter.length, markdown=markdown)
    whole = reply_parts(text, style=adapter.style, limit=100_000, size=adapter.length, markdown=markdown)
    assert all(adapter.length(adapter.style.visible(part)) <= limit for part in parts), parts
    assert all(adapter.style.visible(part).strip() for part in parts), parts
    assert not any(_EMPTY_CODE.fullmatch(shown(part)) for part in parts), parts
    assert _in_order(_shown(kind, whole), _shown(kind, parts)), parts


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("limit", [1, 5, 12, 4096])
def test_a_reply_of_nothing_but_spaces_is_our_empty_reply_within_the_limit(kind, limit):
    adapter = adapter_for(kind)
    parts = reply_parts(" \n\n\t ", style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    assert all(adapter.length(adapter.style.visible(part)) <= limit for part in parts)
    assert "".join(adapter.style.visible(part) for part in parts).replace(" ", "") == "(emptyreply)"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("markdown", [True, False], ids=["model", "ours"])
def test_a_part_cut_between_words_does_not_end_with_the_space_between_them(kind, markdown):
    adapter = adapter_for(kind)
    parts = reply_parts(SMALL["words"], style=adapter.style, limit=12, size=adapter.length, markdown=markdown)
    assert len(parts) > 1 and all(part == part.rstrip() for part in parts), parts


@pytest.mark.parametrize("kind", KINDS)
def test_text_of_ours_holding_three_backticks_cut_over_parts_gets_no_fences_of_ours(kind):
    """A notice or a command's answer quoting what someone wrote formats nothing: its ``` are
    characters, and cutting it adds none (nor a language name) to any part."""
    adapter = adapter_for(kind)
    text = "You wrote:\n```python\nx = 1\ny = 2\nand then more words after it all."
    parts = reply_parts(text, style=adapter.style, limit=30, size=adapter.length, markdown=False)
    shown = "".join(adapter.style.visible(part) for part in parts).replace("\u200b", "")
    assert shown.count("`") == 3 and shown.count("python") == 1, parts
    assert re.sub(r"\s", "", shown) == re.sub(r"\s", "", text)



TILDES_WITH_TICKS = "~~~ a`b` c\ncode line one\ncode line two\n~~~\n\nafter"


@pytest.mark.parametrize("limit", [2000, 40])
def test_a_tilde_fence_whose_info_holds_backticks_is_a_discord_code_block_without_them(limit):
    """Discord reads a language only as a word right after the three backticks: an info
    string holding backticks would show as the code's first line."""
    discord = adapter_for("discord")
    parts = reply_parts(TILDES_WITH_TICKS, style=discord.style, limit=limit, size=discord.length, markdown=True)
    code = [line for part in parts for line in part.splitlines() if line.startswith("```")]
    assert code and all(line == "```" for line in code), parts
    assert [line for part in parts for line in part.splitlines() if "line" in line] == ["code line one",
                                                                                          "code line two"]
    assert parts[-1].endswith("after")


UNCLOSED = "Here:\n```python\nx = 1\ny = 2\n\nThe rest of the reply is prose with **bold** words in it."


@pytest.mark.parametrize("limit", [2000, 60, 40])
def test_an_unclosed_code_block_on_discord_reads_in_parts_as_discord_shows_it_whole(limit):
    """Discord's client shows ``` that nothing closes as it is, and the text after it as
    text: cut over parts, the rest of the reply is not put in code blocks of ours, and the
    three backticks are still shown where they were."""
    discord = adapter_for("discord")
    parts = reply_parts(UNCLOSED, style=discord.style, limit=limit, size=discord.length, markdown=True)
    assert all(len(part) <= limit for part in parts)
    assert not any(code_blocks(part)[0] for part in parts), parts  # the fence opens no block in any part
    joined = "\n".join(parts)
    assert "**bold**" in joined and joined.count("python") == 1
    assert "".join(shown(part) for part in parts).replace(" ", "").replace("\n", "") == (
        "Here:```pythonx=1y=2Therestofthereplyisprosewith**bold**wordsinit.")


@pytest.mark.parametrize("kind", ["telegram", "slack", "whatsapp", "discord"])
@pytest.mark.parametrize("language", ["", "javascript"])
def test_a_code_block_that_fits_a_part_as_the_platform_counts_it_is_one_part_beside_a_long_paragraph(kind, language):
    """Cut with the paragraph after it, a code block is measured as the platform counts it
    (Telegram shows neither its fences nor its language): one that fits a part is not cut."""
    adapter = adapter_for(kind)
    code = [f"line {n:02d} of code" for n in range(10)]
    text = f"```{language}\n" + "\n".join(code) + "\n```\n\n" + "Outro " + "word " * 600
    shown_code = visible_text(_telegram(text, 10**6)[0]).split("Outro")[0].strip() if kind == "telegram" else None
    limit = len(shown_code) + 1 if shown_code else adapter.length(
        reply_parts(f"```{language}\n" + "\n".join(code) + "\n```", style=adapter.style, limit=10**6,
                    size=adapter.length, markdown=True)[0]) + 1
    parts = reply_parts(text, style=adapter.style, limit=limit, size=adapter.length, markdown=True)
    shown = [visible_text(part) if kind == "telegram" else part for part in parts]
    assert all(adapter.length(part) <= limit for part in shown)
    with_code = [part for part in shown if "of code" in part]
    assert len(with_code) == 1 and all(line in with_code[0] for line in code), shown


@pytest.mark.parametrize("text", ["**alpha *alpha* alpha**", "# **alpha *alpha* alpha**"])
@pytest.mark.parametrize("limit", [13, 14, 15, 16])
def test_a_span_cut_where_no_clean_space_is_falls_between_words_that_read_as_they_did(text, limit):
    """No cut between words is clean here (the next piece's "**" would meet the "*" closing the
    italic): the last resort still takes one between words that reads as the text did,
    not one inside a word."""
    parts = _telegram(text, limit)
    assert len(parts) > 1
    assert _read(parts) == _whole(text)
    assert all(set(visible_text(part).split()) == {"alpha"} for part in parts), [visible_text(p) for p in parts]


@pytest.mark.parametrize("limit", [13, 17])
def test_inline_code_over_lines_is_cut_before_a_line_begun_with_three_backticks_between_words(limit):
    """A cut at the line break before "```word" opens the next piece's code with a space
    between its backtick and the line's (which would have made a run of four): the cut is
    taken, not one inside a word."""
    text = BLANK_AFTER_A_HARD_CUT
    parts = _telegram(text, limit)
    assert _read(parts) == _whole(text)
    words = set(visible_text(_telegram(text, 10**6)[0]).split())
    shown = [word for part in parts for word in visible_text(part).split()]
    assert all(word in words or set(word) == {"a"} for word in shown), shown  # "aaa…": longer than a part
