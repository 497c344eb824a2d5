from __future__ import annotations

import pytest

from markdown_it import MarkdownIt

from channels_app.split import split_message


def test_short_text_is_one_part():
    assert split_message("hello", 4096) == ["hello"]


@pytest.mark.parametrize("limit", [2000, 4000, 4096])
def test_parts_respect_the_limit_and_keep_every_word_in_order(limit):
    words = [f"word{i}" for i in range(3000)]
    text = " ".join(words[:1000]) + "\n\n" + " ".join(words[1000:2000]) + "\n" + " ".join(words[2000:])
    parts = split_message(text, limit)
    assert all(len(p) <= limit for p in parts)
    assert " ".join(" ".join(parts).split()) == " ".join(text.split())


def test_a_code_block_that_fits_is_never_split():
    code = "```js\n" + "".join(f"console.log({i});\n" for i in range(80)) + "```"
    text = "x " * 1500 + "\n\n" + code + "\n\nafter"
    parts = split_message(text, 2000)
    assert sum(code in p for p in parts) == 1
    assert all(p.count("```") % 2 == 0 for p in parts)


def test_a_code_block_longer_than_a_part_is_reopened_in_each_part():
    code = "```python\n" + "".join(f"value_{i} = {i} * 2\n" for i in range(400)) + "```"
    parts = split_message(code, 2000)
    assert len(parts) > 1
    for part in parts:
        assert len(part) <= 2000
        assert part.startswith("```python\n") and part.rstrip().endswith("```")
    body = "".join(p.removeprefix("```python\n").rstrip().removesuffix("```") for p in parts)
    assert body.split() == code.removeprefix("```python\n").removesuffix("```").split()


def test_a_word_longer_than_the_limit_is_cut_hard():
    parts = split_message("a" * 5000, 2000)
    assert [len(p) for p in parts] == [2000, 2000, 1000]


def test_every_kind_of_binding_has_an_adapter_with_a_length_limit():
    """A reply's parts are split to its binding's adapter's limit and sent by it
    (channels_app.delivery, channels_app.sending): no kind of binding may lack one."""
    from channels_app.adapters import adapter_for
    from channels_app.models import ChannelBinding

    for kind in ChannelBinding.Kind.values:
        adapter = adapter_for(kind)
        assert adapter is not None, kind
        assert adapter.limit > 0, kind


def _code_blocks(part: str) -> list[str]:
    """What a part shows as code: the content of each code block Markdown reads in it."""
    tokens = MarkdownIt("commonmark").parse(part)
    assert all(t.type in ("fence", "code_block") for t in tokens), part  # nothing but code
    return [t.content for t in tokens]


def test_a_long_line_of_backticks_cut_in_a_code_block_never_closes_it_early():
    line = "x" + "`" * 250 + " ```` " + "`" * 60
    parts = split_message(f"```\n{line}\n```", 100)
    blocks = [_code_blocks(part) for part in parts]
    assert all(len(found) == 1 for found in blocks)  # one code block each, none closed by its own text
    assert "".join(found[0].removesuffix("\n") for found in blocks) == line


def test_a_code_block_fenced_with_four_backticks_is_closed_with_four_in_every_part():
    lines = ["Write it as:", "```python", "print(1)", "```"] * 20
    parts = split_message("````markdown\n" + "\n".join(lines) + "\n````", 200)
    assert len(parts) > 1
    assert all(part.startswith("````markdown\n") and part.endswith("\n````") for part in parts)
    shown = [line for part in parts for found in _code_blocks(part) for line in found.splitlines()]
    assert shown == lines  # the ``` inside are code, and no ``` of ours is added
