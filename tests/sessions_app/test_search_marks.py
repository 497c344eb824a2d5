"""A message of thousands of combining marks in a row (as "Zalgo" text is written) costs
search what any message of its length costs. Composing such a run (NFC) sorts its marks by
their class, one place at a time: a run of marks of alternating classes cost the square of
its length, in Python (SQLite's index, memory search, the words of a query) and in
PostgreSQL's index function alike, so a message the API takes (100,000 characters) held
its append, and the database, for seconds to minutes."""
from __future__ import annotations

import json
import re

import pytest

from memory_app.selectors import memory_search
from memory_app.services import memory_add
from sessions_app.fulltext import NON_STARTER, STREAM_SAFE_RUN, composed, fold, search_text
from sessions_app.models import Message
from tenancy.services import api_token_create

from .test_search import found

# Classes 230 and 220 (above, below) in turn; Thai tone and vowel marks (107, 103) in turn,
# inside a run of Thai letters, which the index spaces out letter by letter (NFKC).
LATIN_MARKS = "\u0301\u0316"
THAI_MARKS = "\u0e48\u0e38"


def longest_run_of_marks(text: str) -> int:
    return max((len(run) for run in re.findall(f"{NON_STARTER}+", text)), default=0)


def _zalgo(base: str, marks: str, length: int) -> str:
    return base + marks * ((length - len(base)) // len(marks))


@pytest.mark.parametrize("base, marks", [("a", LATIN_MARKS), ("ก", THAI_MARKS)])
def test_a_message_of_marks_in_a_row_is_composed_a_run_at_a_time_and_its_words_still_found(client, world, base, marks):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    content = "pineapple " + _zalgo(base, marks, 99_000) + " tomorrow"
    # What composing is given holds runs it sorts at once (the cost is measured by
    # bench/search_marks.py, against a message of plain letters of the same length).
    assert longest_run_of_marks(composed(content)) <= STREAM_SAFE_RUN < longest_run_of_marks(content)
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201
    assert Message.objects.get(tenant=world.tenant_a).content == content  # stored as written
    assert found(world, "pineapple tomorrow") == [(1, content)]


def test_a_memory_and_a_query_of_marks_in_a_row_are_remembered_and_found(world):
    content = "pineapple " + _zalgo("a", LATIN_MARKS, 99_000)
    memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="fact", content=content)
    hits = memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="pineapple " + content)
    assert [m.content for m in hits] == [content]


def test_a_short_run_of_marks_is_composed_as_before():
    """Up to 30 marks in a row (Unicode's stream-safe limit) compose and sort as NFC does."""
    assert fold("cafe\u0301") == "cafe" and search_text("cafe\u0301") == "cafe"
    assert fold("a" + "\u0316\u0301" * 15) == "a"
    assert search_text("ἀ" + "\u0345" * 3) == "α"


@pytest.mark.django_db
def test_the_index_function_reads_a_long_run_of_marks_as_python_does():
    """PostgreSQL's function (migration 0018) and Python's search text (SQLite's index,
    memories) make a run stream-safe alike, from the same list of marks."""
    import importlib

    from django.db import connection

    from sessions_app.fulltext import NON_STARTER

    migration = importlib.import_module("sessions_app.migrations.0018_message_search_stream_safe")
    assert migration.NON_STARTER == NON_STARTER
    if connection.vendor != "postgresql":
        return
    texts = ["naïve café", _zalgo("e", LATIN_MARKS, 5_000) + " x", _zalgo("ก", THAI_MARKS, 5_000),
             "o" + "\u05b0\u0301" * 40 + " hebrew"]
    with connection.cursor() as cursor:
        for text in texts:
            cursor.execute("SELECT message_search_text(%s)", [text])
            # Word for word: PostgreSQL writes a space where Python drops a Thai mark.
            assert cursor.fetchone()[0].split() == (search_text(text) or text).split(), text[:20]
