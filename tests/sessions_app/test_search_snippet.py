"""The line a search result shows of a found message (hit_snippet), and where the words
found are in it (hit_spans): the same for any text however it is folded, and a huge
message's line is made without reading it letter by letter (bench/search_snippet.py)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from sessions_app.fulltext import fold
from sessions_app.search import _folded, hit_snippet, hit_spans

# ASCII, accented and decomposed Latin (a mark of its own folds to nothing), Greek with its
# final sigma, full-width letters, Chinese and Korean, "ß" and "İ".
LETTERS = st.text(st.sampled_from("aZ 9_.-\nÉéeu\u0301ΣσςΛόγος\uff34\uff4f通过회의ßİ"), max_size=60)


@hypothesis_settings(max_examples=300, deadline=None)
@given(LETTERS)
def test_a_text_is_folded_as_each_of_its_letters_is_alone_with_each_place_where_it_came_from(text):
    letters = [fold(char) for char in text]
    folded, origin = _folded(text)
    assert folded == "".join(letters)
    assert list(origin) == [i for i, low in enumerate(letters) for _ in low]


@hypothesis_settings(max_examples=200, deadline=None)
@given(LETTERS, st.lists(st.sampled_from(["ab", "é", "σοσ", "通过", "회의", "ss", "to"]), min_size=1, max_size=3))
def test_a_snippet_begins_around_the_first_word_found(text, terms):
    spans = hit_spans(text, terms)
    snippet = hit_snippet(text, terms, width=20)
    if not spans:
        assert snippet == text[:20].strip() + ("…" if len(text) > 20 else "")
    else:
        found = text[spans[0][0]:spans[0][1]].strip()
        assert found[:5] in snippet.replace("…", ""), (snippet, found)


def test_the_snippet_of_a_huge_message_shows_the_word_near_its_end():
    log = "2026-12-06 21:44:03 INFO worker ready, nothing due\n" * 20_000 + "the Deadline is Friday."
    snippet = hit_snippet(log, ["deadline"], width=60)
    assert snippet.startswith("…") and "Deadline is Friday." in snippet
    mixed = "The build passed 通过了所有测试 today. " * 20_000 + "the Deadline is Friday."
    assert "Deadline is Friday." in hit_snippet(mixed, ["deadline"], width=60)


def test_the_snippet_begins_around_whichever_word_comes_first_not_the_first_asked_for():
    text = "x " * 200 + "an apple here " + "y " * 200 + "a zebra there"
    snippet = hit_snippet(text, ["zebra", "apple"], width=40)
    assert "apple" in snippet and "zebra" not in snippet
