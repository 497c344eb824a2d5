"""Where no full-text index serves a memory search (a database other than PostgreSQL and
SQLite), the owner's memories are scanned: the scan finds the same memories as the index
does, in the forms a reader takes for one (accents, Greek, full-width, Korean particles
and compounds). Checked against the index of the database the tests run on."""
from __future__ import annotations

import unicodedata

import pytest

from memory_app.fulltext import memory_terms
from memory_app.selectors import _Kinds, _search_scan
from sessions_app.fulltext import scan_finds

from ..factories.memory_app import remember
from .test_search import search

pytestmark = pytest.mark.django_db

TEXTS = ["naïve café owners in Zürich", "the cafe on the corner", "Müller sent his résumé",
         unicodedata.normalize("NFD", "Καλημέρα κόσμε, ήταν σαφής"), "Ο λόγος του ήταν σαφής", "ΛΟΓΟΣ ΚΑΙ ΠΡΑΞΗ",
         "회의록을 보냈어요", "내일 회의는 10시예요", "주간회의 준비", "집에 가요", "편집했어요",
         "Ｔｏｋｙｏの会議はＲｏｏｍ　４０２です", "我昨天吃了寿司", "The lease on the flat ends in March",
         "مَرْحَبًا بِكُمْ", "مرحبا يا صديقي", "مـــرحبا", "שָׁלוֹם עֲלֵיכֶם", "\ufb2aלום לכולם", "שלום",
         "ذهبت إلى مدرسة جديدة", "إيمان وأمل", "این کتاب را خواندم", "قرأت كتاب القرآن", "كنت بالمدرسة أمس",
         "والمدرسة قريبة", "رأيت ولد صغير", "قابلت الوزير"]
QUERIES = ["cafe", "café", unicodedata.normalize("NFD", "café"), "muller", "resume", "zurich",
           unicodedata.normalize("NFD", "σαφής"), "σαφης", "κοσμε", "ΛΟΓΟΣ", "회의", "회의를", "회의록", "집", "편집",
           "tokyo", "４０２", "寿司", "会議", "leases", "lease march", "회의 준비", "مرحبا", "مَرْحَبًا", "مـرحبا",
           "שלום", "שָׁלוֹם", "עליכם", "مدرسه", "الى", "ايمان", "کتاب", "كتاب", "القران", "المدرسة", "للمدرسة", "ولد", "وزير", "الوزير"]


def test_a_memory_scan_finds_what_the_index_finds(world):
    for text in TEXTS:
        remember(world.tenant_a, world.qor_a, world.alice, text)
    for query in QUERIES:
        terms = memory_terms(query)
        scanned = _search_scan(world.tenant_a.pk, world.qor_a.pk, world.alice.pk, terms, 20, _Kinds([], None))
        assert {m.content for m in scanned} == {m.content for m in search(world, query, limit=20)}, ascii(query)


def test_a_korean_syllable_alone_is_scanned_for_at_the_start_of_a_word_only():
    assert scan_finds("집에 가요", "집") and not scan_finds("편집했어요", "집")
    assert scan_finds("주간회의 준비", "회의") and not scan_finds("주간회의 준비", "의")
