"""Where no full-text index serves a history search (a database other than PostgreSQL and
SQLite), the person's messages are scanned: the scan finds the same messages as the
index does. Checked against the index of the database the tests run on."""
from __future__ import annotations

import pytest

from sessions_app.fulltext import message_terms
from sessions_app.models import Message
from sessions_app.search import _scanned

from ..memory_app.test_search_scan import QUERIES, TEXTS
from .test_search import chat, found, say

pytestmark = pytest.mark.django_db


def test_a_history_scan_finds_what_the_index_finds(world):
    session = chat(world)
    for text in TEXTS:
        say(session, text)
    rows = Message.objects.filter(session=session)
    for query in QUERIES:
        scanned = _scanned(rows, message_terms(query)).order_by("-created_at", "-id")
        assert [(m.seq, m.content) for m in scanned] == found(world, query), ascii(query)
