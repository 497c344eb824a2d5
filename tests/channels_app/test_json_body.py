"""The one reader of JSON bodies and frames (channels_app.json_body): what it refuses and
what it lets through, whichever way the check is made."""
from __future__ import annotations

import json

import pytest

from channels_app.json_body import MAX_CONTAINERS, MAX_DEPTH, BodyRefused, json_parse


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("text", [
    '{"text": "\\ud800"}',  # a lone high surrogate, escaped
    '{"text": "\\uDC00 and more"}',  # a lone low one, upper case
    '{"a": [1, {"b": "x\\uDbFf"}]}',  # deeper down, mixed case
    '{"\\ud83d": 1}',  # in a key
    '{"text": "\\ud83d\\u0041"}',  # half a pair followed by a letter
    '{"text": "\ud800"}',  # the character itself, in a frame given as text
])
def test_a_lone_surrogate_anywhere_is_refused(text):
    with pytest.raises(BodyRefused) as refused:
        json_parse(text)
    assert refused.value.status == 400 and "surrogate" in str(refused.value)


@pytest.mark.parametrize("text", [
    '{"text": "\\ud83d\\ude00"}',  # an escaped pair: one character (😀)
    '{"text": "a \\\\ud800 b"}',  # an escaped backslash before "ud800": six letters, no surrogate
    '{"text": "caf\\u00e9"}',
    json.dumps({"text": "braces { [ in a string", "n": 1}),
])
def test_what_parses_to_real_characters_is_read(text):
    assert json_parse(text) == json.loads(text)
    assert json_parse(text.encode()) == json.loads(text)


def test_nesting_is_refused_past_the_limit_and_read_up_to_it():
    assert json_parse(nested(MAX_DEPTH)) is not None
    with pytest.raises(BodyRefused, match="nested deeper"):
        json_parse(nested(MAX_DEPTH + 1))
    # Many brackets side by side nest no deeper than one: read.
    wide = json.dumps([[i] for i in range(500)])
    assert json_parse(wide) == [[i] for i in range(500)]
    # Brackets inside strings count toward the text's brackets, not the document's depth.
    quoted = json.dumps({"text": "[" * 200})
    assert json_parse(quoted) == {"text": "[" * 200}


@pytest.mark.parametrize("text, says", [
    ('notjson', "Expecting value at line 1, column 1"),
    ('{"content": "hi",\n "channel": }', "Expecting value at line 2, column 13"),
    ('{"content": "a\nb"}', "Invalid control character at line 1, column 15"),
])
def test_a_body_that_is_not_json_says_where_it_stops_being_json(text, says):
    """The refusal named a Python class ("not valid JSON (JSONDecodeError)") instead of
    where in the body the JSON went wrong."""
    with pytest.raises(BodyRefused) as refused:
        json_parse(text)
    assert refused.value.status == 400 and says in str(refused.value), refused.value
    assert "JSONDecodeError" not in str(refused.value)


def test_a_body_of_more_objects_and_arrays_than_the_limit_is_refused_and_brackets_in_strings_are_not_counted():
    assert json_parse(json.dumps([[] for _ in range(MAX_CONTAINERS - 1)])) is not None
    with pytest.raises(BodyRefused, match="more than 10,000 objects and arrays"):
        json_parse(json.dumps([{} for _ in range(MAX_CONTAINERS)]))
    text = json.dumps({"content": '[{"x": "\\"}' * 20_000})  # a paste of code: brackets and escapes in a string
    assert json_parse(text) == json.loads(text)
