"""History search reads a word the same whichever of its written forms is typed: Greek
with or without its accents, in capitals, with its final sigma (ς) or the ordinary one
(σ), and letters and digits typed full-width (as Japanese and Chinese keyboards write
them) or not. On both databases alike, and the page marks the word as it is written."""
from __future__ import annotations

import unicodedata

import pytest
from django.db import connection

from sessions_app.fulltext import message_terms
from sessions_app.migrations._trigger import SEARCH_TABLE
from sessions_app.search import hit_spans

from .older_versions import said_before, state_at
from .test_search import chat, found, say
from .test_search_unspaced import KOREAN

GREEK = "Ο λόγος του ήταν σαφής και σύντομος"
CAPITALS = "ΛΟΓΟΣ ΚΑΙ ΠΡΑΞΗ"


def test_greek_is_found_whatever_its_final_sigma_accents_and_capitals(world):
    session = chat(world)
    say(session, GREEK)
    say(session, CAPITALS, role="assistant")
    both = [(2, CAPITALS), (1, GREEK)]
    for query in ["λόγος", "λογοσ", "λογος", "ΛΟΓΟΣ", "Λόγος", "λόγοσ"]:
        assert found(world, query) == both, query
    assert found(world, "σαφης") == [(1, GREEK)]
    assert found(world, "ΣΑΦΗΣ") == [(1, GREEK)]
    assert found(world, "ηταν συντομος") == [(1, GREEK)]  # every word, accents or not
    assert found(world, "πράξη") == [(2, CAPITALS)]
    assert found(world, "πραξεις") == []


def test_every_greek_letter_is_searched_as_its_bare_small_letter():
    """The table the index is written with (sessions_app.fulltext.NORMALISED, and migration
    0015's copy of it) holds every accented, breathing or capital Greek letter there is."""
    import importlib
    import unicodedata

    from sessions_app.fulltext import FULL_WIDTH_FROM, FULL_WIDTH_TO, GREEK_FROM, GREEK_TO, fold, search_text

    for code in [*range(0x0370, 0x0400), *range(0x1F00, 0x2000)]:
        letter = chr(code)
        base = unicodedata.normalize("NFD", letter)[0]
        if unicodedata.category(letter).startswith("L") and "\u0391" <= base <= "\u03c9":
            bare = base.lower().replace("ς", "σ")
            assert fold(letter) == bare and (search_text(letter) or letter) == bare, hex(code)
    migration = importlib.import_module(f"sessions_app.migrations.{MIGRATION[1]}")
    written = (migration.GREEK_FROM + migration.FULL_WIDTH_FROM, migration.GREEK_TO + migration.FULL_WIDTH_TO)
    assert written == (GREEK_FROM + FULL_WIDTH_FROM, GREEK_TO + FULL_WIDTH_TO)


def test_a_greek_word_in_capitals_finds_itself(world):
    """Typed in capitals, a word ending in Σ was searched for with ς (Python's lower
    case of a final capital sigma) while PostgreSQL had indexed it with σ."""
    say(chat(world), CAPITALS)
    assert found(world, "ΛΟΓΟΣ") == [(1, CAPITALS)]


def test_full_width_letters_and_digits_are_the_letters_and_digits_they_show(world):
    session = chat(world)
    say(session, "Ｔｏｋｙｏの会議はＲｏｏｍ　４０２です")
    say(session, "Meeting in room 402 at Tokyo office", role="assistant")
    both = [(2, "Meeting in room 402 at Tokyo office"), (1, "Ｔｏｋｙｏの会議はＲｏｏｍ　４０２です")]
    assert found(world, "tokyo") == both
    assert found(world, "Ｔｏｋｙｏ") == both
    assert found(world, "room ４０２") == both
    assert found(world, "４０２ 会議") == [(1, "Ｔｏｋｙｏの会議はＲｏｏｍ　４０２です")]


def test_english_is_found_as_before(world):
    session = chat(world)
    say(session, "The lease on the flat ends in March")
    say(session, "naïve café owners in Zürich")
    assert found(world, "leases") == [(1, "The lease on the flat ends in March")]
    assert found(world, "café") == [(2, "naïve café owners in Zürich")]
    assert found(world, "Zürich owner") == [(2, "naïve café owners in Zürich")]
    assert message_terms("The LEASES of Zürich") == ["leases", "zurich"]


def test_the_words_found_are_marked_as_written_whatever_form_was_typed():
    assert hit_spans(GREEK, message_terms("ΛΟΓΟΣ ΣΑΦΗΣ")) == [(2, 7), (17, 22)]
    assert hit_spans(CAPITALS, message_terms("λόγος")) == [(0, 5)]
    text = "Ｔｏｋｙｏの会議はＲｏｏｍ　４０２です"
    assert [text[a:b] for a, b in hit_spans(text, message_terms("tokyo 402"))] == ["Ｔｏｋｙｏ", "４０２"]
    assert hit_spans("Room 402", message_terms("Ｒｏｏｍ")) == [(0, 4)]
    mixed = "Alice的passport号码是4471"  # a word ends where the letters written without spaces begin
    assert [mixed[a:b] for a, b in hit_spans(mixed, message_terms("passports 4471"))] == ["passport", "4471"]


def test_greek_and_full_width_text_is_never_read_as_search_syntax(world):
    say(chat(world), "ΛΟΓΟΣ ＡＮＤ ＮＥＡＲ")
    say(chat(world, user=world.bob), "ΛΟΓΟΣ of Bob")
    for query in ['ΛΟΓΟΣ" OR owner : *', "ＮＥＡＲ(λογοσ)", "λογοσ＊", "＂λογοσ＂"]:
        assert [c for _, c in found(world, query)] in ([], ["ΛΟΓΟΣ ＡＮＤ ＮＥＡＲ"]), query
    assert found(world, "ΛΟΓΟΣ", user=world.bob) == [(1, "ΛΟΓΟΣ of Bob")]



def test_greek_typed_with_combining_accents_is_the_greek_typed_with_accented_letters(world):
    """A keyboard or a copy from a PDF may write an accent as a letter of its own after the
    vowel (U+0301) instead of the accented vowel: a reader sees the same word, and it is
    found whichever way it was written or typed."""
    session = chat(world)
    combining = unicodedata.normalize("NFD", "Καλημέρα κόσμε, ήταν σαφής")
    say(session, GREEK)
    say(session, combining)
    assert combining != "Καλημέρα κόσμε, ήταν σαφής"
    for query in ["σαφής", unicodedata.normalize("NFD", "σαφής"), "σαφησ", "ΣΑΦΗΣ"]:
        assert found(world, query) == [(2, combining), (1, GREEK)], ascii(query)
    for query in ["κόσμε", unicodedata.normalize("NFD", "κόσμε"), "κοσμε", "καλημερα"]:
        assert found(world, query) == [(2, combining)], ascii(query)
    assert [combining[a:b] for a, b in hit_spans(combining, message_terms("κοσμε"))] == [
        unicodedata.normalize("NFD", "κόσμε")]


LATIN = ["naïve café owners in Zürich", "the cafe on the corner", "Müller sent his résumé",
         "Muller will resume work", unicodedata.normalize("NFD", "CAFÉ CRÈME at noon"), "Ångström and Łódź"]


def test_latin_accents_are_ignored_on_both_databases_alike(world):
    """Accents are ignored as search engines do: "cafe" finds "café" and "café" finds "cafe".
    PostgreSQL kept every accent (café found café alone) while SQLite's index dropped them."""
    session = chat(world)
    for text in LATIN:
        say(session, text)
    cafes = [(5, LATIN[4]), (2, LATIN[1]), (1, LATIN[0])]
    for query in ["café", "cafe", "CAFÉ", unicodedata.normalize("NFD", "café"), "Café"]:
        assert found(world, query) == cafes, ascii(query)
    for query in ["Müller", "muller", "MÜLLER", unicodedata.normalize("NFD", "müller")]:
        assert found(world, query) == [(4, LATIN[3]), (3, LATIN[2])], ascii(query)
    assert found(world, "naive") == found(world, "naïve") == [(1, LATIN[0])]
    assert found(world, "zurich") == [(1, LATIN[0])]
    assert found(world, "résumé") == found(world, "resume") == [(4, LATIN[3]), (3, LATIN[2])]
    assert found(world, "creme") == found(world, "crème") == [(5, LATIN[4])]
    assert found(world, "angstrom") == [(6, LATIN[5])]
    assert found(world, "łódź") == found(world, "łodz") == [(6, LATIN[5])]  # ł is a letter of its own
    assert found(world, "lodz") == []
    text = LATIN[2]
    assert [text[a:b] for a, b in hit_spans(text, message_terms("muller resume"))] == ["Müller", "résumé"]


BEFORE = ("sessions_app", "0014_carried_originals_settled")
MIGRATION = ("sessions_app", "0015_message_search_normalised")


@pytest.mark.django_db(transaction=True)
def test_messages_written_before_the_migration_are_found_after_it(world, schema, monkeypatch):
    import importlib

    from django.core import checks

    before = state_at(schema, BEFORE)
    session = chat(world)
    for text in [GREEK, CAPITALS, "Ｔｏｋｙｏ　４０２", "Alice likes tea", "我昨天吃了寿司"]:
        said_before(before, session, text)
    said_before(before, chat(world, user=world.bob), "ΛΟΓΟΣ of Bob")
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":  # as the version before indexed them: the text as written
            cursor.execute(f"UPDATE {SEARCH_TABLE} SET content = (SELECT content FROM sessions_app_message m"
                           f" WHERE m.id = {SEARCH_TABLE}.rowid) WHERE content NOT LIKE %s", ["%寿%"])
            cursor.execute(f"SELECT content FROM {SEARCH_TABLE} WHERE content LIKE %s", ["%ΛΟΓΟΣ%"])
            assert sorted(row[0] for row in cursor.fetchall()) == sorted([CAPITALS, "ΛΟΓΟΣ of Bob"])
        else:
            cursor.execute("SELECT message_search_text(%s)", [GREEK])
            assert cursor.fetchone()[0] == GREEK
    migration = importlib.import_module(f"sessions_app.migrations.{MIGRATION[1]}")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    schema.to([MIGRATION])
    assert found(world, "λογοσ") == [(2, CAPITALS), (1, GREEK)]
    assert found(world, "tokyo 402") == [(3, "Ｔｏｋｙｏ　４０２")]
    assert found(world, "tea") == [(4, "Alice likes tea")]
    assert found(world, "寿司") == [(5, "我昨天吃了寿司")]
    assert found(world, "λογος", user=world.bob) == [(1, "ΛΟΓΟΣ of Bob")]
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
    schema.to([BEFORE])  # and back: indexed as before
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"SELECT content FROM {SEARCH_TABLE} ORDER BY rowid")
            assert [row[0] for row in cursor.fetchall()][:4] == [GREEK, CAPITALS, "Ｔｏｋｙｏ　４０２", "Alice likes tea"]
        else:
            cursor.execute("SELECT message_search_text(%s)", [GREEK])
            assert cursor.fetchone()[0] == GREEK
    assert found(world, "tea") == [(4, "Alice likes tea")]
    assert found(world, "寿司") == [(5, "我昨天吃了寿司")]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's function; SQLite's is search_text itself")
def test_postgresql_normalises_as_search_text_does(world):
    """Every letter the search text writes in another form, PostgreSQL's index writes in
    the same one, and reads the same words in the same places (the inner parts of Korean
    words too); English text without accents is left as it was,
    its index entries as before."""
    from sessions_app.fulltext import NORMALISED, search_text

    letters = "".join(sorted(map(chr, NORMALISED)))
    with connection.cursor() as cursor:
        for text in [letters, GREEK, CAPITALS, "Ｔｏｋｙｏの会議はＲｏｏｍ　４０２です", "ΐΰϊϋΆΈ ἀρχῇ ὦ", *LATIN, *KOREAN,
                     unicodedata.normalize("NFD", GREEK + " " + " ".join(KOREAN)), "회의록 寿司 주간회의 デパート",
                     "스" * 30, "Ǘ ḉ ẫ Ǻ ǟ x\u0301\u0308 и\u0306"]:
            cursor.execute("SELECT to_tsvector('english', message_search_text(%s)) = to_tsvector('english', %s)",
                           [text, search_text(text) or text])
            assert cursor.fetchone()[0], text
        cursor.execute("SELECT message_search_text(%s)", [letters])
        assert cursor.fetchone()[0] == letters.translate(NORMALISED)
        english = "The lease ends in March; naive cafe, ﬁle #42 — e-mail: a@b.example"
        cursor.execute("SELECT message_search_text(%s)", [english])
        assert cursor.fetchone()[0] == english


def test_japanese_is_found_whichever_width_its_katakana_is_written_in(world):
    """Half-width katakana (old mail, some keyboards and phones) are the katakana they show:
    a word typed in either width finds it written in the other, as memory search does."""
    session = chat(world)
    say(session, "ﾃﾞﾊﾟｰﾄでﾊﾟﾝを買った")
    say(session, "東京タワーに行った", role="assistant")
    say(session, "パンダを見た")
    assert found(world, "デパート") == [(1, "ﾃﾞﾊﾟｰﾄでﾊﾟﾝを買った")]
    assert found(world, "ﾃﾞﾊﾟｰﾄ") == [(1, "ﾃﾞﾊﾟｰﾄでﾊﾟﾝを買った")]
    assert found(world, "ﾀﾜｰ") == [(2, "東京タワーに行った")]
    assert found(world, "パン") == [(3, "パンダを見た"), (1, "ﾃﾞﾊﾟｰﾄでﾊﾟﾝを買った")]
    assert found(world, "ﾊﾝ") == []  # the voicing marks still tell words apart
    assert found(world, "タワー 東京") == [(2, "東京タワーに行った")]
    text = "ﾃﾞﾊﾟｰﾄでﾊﾟﾝを買った"
    assert [text[a:b] for a, b in hit_spans(text, message_terms("デパート パン"))] == ["ﾃﾞﾊﾟｰﾄ", "ﾊﾟﾝ"]
    assert hit_spans("東京タワー", message_terms("ﾀﾜｰ")) == [(2, 5)]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's concurrent reindex")
@pytest.mark.django_db(transaction=True)
def test_a_reindex_interrupted_leaves_nothing_behind_when_the_migration_runs_again(world, schema):
    """An interrupted REINDEX CONCURRENTLY leaves the index's new copy behind, marked
    invalid: never read, yet written with every message from then on."""
    say(chat(world), CAPITALS)
    schema.to([BEFORE])
    with connection.cursor() as cursor:  # what an interruption leaves (the catalog's own flag; a superuser)
        cursor.execute("CREATE INDEX message_search_text_gin_ccnew ON sessions_app_message"
                       " USING gin (to_tsvector('english'::regconfig, message_search_text(content)))")
        cursor.execute("UPDATE pg_index SET indisvalid = false"
                       " WHERE indexrelid = 'message_search_text_gin_ccnew'::regclass")
    schema.to([MIGRATION])
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                       " WHERE c.relname LIKE 'message_search_text%%'")
        assert cursor.fetchall() == [("message_search_text_gin", True)]
    assert found(world, "λογοσ") == [(1, CAPITALS)]


BEFORE_ACCENTS = ("sessions_app", "0016_message_delivery_unplanned")
ACCENTS = ("sessions_app", "0017_message_search_accents_korean")
WRITTEN_BEFORE = ["naïve café owners", "주간회의 준비", unicodedata.normalize("NFD", "καλημέρα κόσμε"), "Alice likes tea",
                  "我昨天吃了寿司", "λόγος και πράξη"]


@pytest.mark.django_db(transaction=True)
def test_messages_written_before_the_accents_and_korean_migration_are_found_after_it(world, schema, monkeypatch):
    import importlib

    from django.core import checks

    schema.to([BEFORE_ACCENTS])
    session = chat(world)
    for text in WRITTEN_BEFORE:
        say(session, text)
    say(chat(world, user=world.bob), "주간회의 of Bob")
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":  # as the version before indexed them: these as written
            cursor.execute(f"UPDATE {SEARCH_TABLE} SET content = (SELECT content FROM sessions_app_message m"
                           f" WHERE m.id = {SEARCH_TABLE}.rowid) WHERE content NOT LIKE %s AND content NOT LIKE %s",
                           ["%寿%", "%λογοσ%"])
        else:
            cursor.execute("SELECT message_search_text(%s)", [WRITTEN_BEFORE[0]])
            assert cursor.fetchone()[0] == WRITTEN_BEFORE[0]
    assert found(world, "회의") == []
    migration = importlib.import_module(f"sessions_app.migrations.{ACCENTS[1]}")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    schema.to([ACCENTS])
    assert found(world, "cafe") == found(world, "café") == [(1, WRITTEN_BEFORE[0])]
    assert found(world, "회의") == [(2, WRITTEN_BEFORE[1])]
    assert found(world, "κόσμε") == found(world, "κοσμε") == [(3, WRITTEN_BEFORE[2])]
    assert found(world, "tea") == [(4, "Alice likes tea")]
    assert found(world, "寿司") == [(5, "我昨天吃了寿司")]
    assert found(world, "λογος") == [(6, "λόγος και πράξη")]
    assert found(world, "회의", user=world.bob) == [(1, "주간회의 of Bob")]
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
    schema.to([BEFORE_ACCENTS])  # and back: indexed as before
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"SELECT content FROM {SEARCH_TABLE} ORDER BY rowid")
            assert [row[0] for row in cursor.fetchall()][:4] == WRITTEN_BEFORE[:4]
        else:
            cursor.execute("SELECT message_search_text(%s)", [WRITTEN_BEFORE[1]])
            assert cursor.fetchone()[0] == WRITTEN_BEFORE[1]
    assert found(world, "회의") == []
    assert found(world, "tea") == [(4, "Alice likes tea")]
    assert found(world, "λογος") == [(6, "λόγος και πράξη")]


def test_the_migrations_index_as_the_search_text_does():
    """Migration 0016 (and memory_app's 0010, which reads it) writes stored messages'
    search text with a copy of sessions_app.fulltext kept as it was written: the two agree."""
    import importlib

    from sessions_app import fulltext

    migration = importlib.import_module(f"sessions_app.migrations.{ACCENTS[1]}")
    assert (migration.LATIN_FROM, migration.LATIN_TO) == (fulltext.LATIN_FROM, fulltext.LATIN_TO)
    assert migration.COMBINING_ACCENTS == fulltext.COMBINING_ACCENTS
    assert (migration.HANGUL_PART, migration.HANGUL_PART_MARK) == (fulltext.HANGUL_PART, fulltext.HANGUL_PART_MARK)
    for text in [*WRITTEN_BEFORE, *LATIN, *KOREAN, GREEK, CAPITALS, "Ｔｏｋｙｏの会議はＲｏｏｍ　４０２です", "스" * 30,
                 unicodedata.normalize("NFD", "주간회의 Ǘ ḉ"), "ﾃﾞﾊﾟｰﾄ x\u0301"]:
        assert migration.search_text(text) == (fulltext.search_text(text) or text), text
    for code in range(0x00C0, 0x2000):  # every accented Latin letter the table should hold, and no other
        letter = chr(code)
        parts = unicodedata.normalize("NFD", letter)
        bare = len(parts) > 1 and parts[0].isascii() and parts[0].isalpha() and all(map(unicodedata.combining, parts[1:]))
        assert (letter in fulltext.LATIN_FROM) == (bare and code < 0x0250 or 0x1E00 <= code < 0x1F00 and bare), hex(code)
