"""History and memory search read Arabic and Hebrew words with or without their vowel
points ("مرحبا" finds "مَرْحَبًا", "שלום" finds "שָׁלוֹם", and back), the other signs
written over and under their letters (shadda, dagesh, cantillation, Quranic marks), and
an Arabic word stretched with tatweel ("مـرحبا") as the word: a reader takes them for one
word, as for a Latin word with or without its accents. On both databases alike, in what
is indexed and what is typed; the word found is marked whole, its points with it. The
vowel signs of the Indic scripts still tell words apart (केला, banana, is not किला, fort)."""
from __future__ import annotations

import re
import sys
import unicodedata

import pytest
from django.db import connection

from memory_app.models import Memory
from memory_app.selectors import memory_search
from qorven.agent.retrieval import memories_for
from sessions_app.fulltext import fold, message_terms, search_terms, search_text
from sessions_app.migrations._trigger import SEARCH_TABLE
from sessions_app.search import hit_spans

from ..factories.memory_app import remember
from .test_search import chat, found, say

pytestmark = pytest.mark.django_db

POINTED = "مَرْحَبًا بِكُمْ فِي القَاهِرَةِ"  # "welcome to Cairo", pointed
PLAIN = "مرحبا بكم في القاهرة"  # the same words, as they are usually written
STRETCHED = "مـــرحبا يا صديقي"  # tatweel (U+0640) draws the word out
HEBREW = "שָׁלוֹם עֲלֵיכֶם"  # "peace be upon you", pointed
HEBREW_PLAIN = "שלום עליכם"
CANTILLATED = "בְּרֵאשִׁ֖ית בָּרָ֣א אֱלֹהִ֑ים"  # Genesis 1:1, with its cantillation marks
# The shin with its dot as one character (U+FB2A), which NFC writes as the letter and the dot.
PRESENTATION = "\ufb2aלום לכולם"


def test_a_word_is_one_search_term_with_or_without_its_points():
    assert search_terms(POINTED) == search_terms(PLAIN) == search_terms("مـرحبا بكـم في القاهـــرة")
    assert message_terms("שָׁלוֹם") == message_terms("שלום") == message_terms("\ufb2aלום") == ["שלום"]
    assert fold("مـرحبا") == fold("مَرْحَبًا") == "مرحبا"
    assert fold("בְּרֵאשִׁ֖ית") == "בראשית"
    # Punctuation of Hebrew stays: a maqaf joins two words, a sof pasuq ends a verse.
    assert fold("כָּל־הָאָרֶץ׃") == "כל־הארץ׃"


def test_an_unpointed_word_finds_it_pointed_and_a_pointed_one_finds_it_unpointed(world):
    session = chat(world)
    say(session, POINTED)
    say(session, PLAIN, role="assistant")
    say(session, STRETCHED)
    say(session, HEBREW)
    say(session, HEBREW_PLAIN, role="assistant")
    say(session, CANTILLATED)
    say(session, PRESENTATION)
    say(session, "Alice likes tea")
    welcome = [(3, STRETCHED), (2, PLAIN), (1, POINTED)]
    for query in ["مرحبا", "مَرْحَبًا", "مـرحبا", "مرحـــبا", "مَرْحـبًا"]:
        assert found(world, query) == welcome, query
    for query in ["القاهرة", "القَاهِرَةِ", "مرحبا القاهرة", "مَرْحَبًا بِكُمْ"]:
        assert found(world, query) == [(2, PLAIN), (1, POINTED)], query
    for query in ["שלום", "שָׁלוֹם", "\ufb2aלום", "שׁלום"]:
        assert found(world, query) == [(7, PRESENTATION), (5, HEBREW_PLAIN), (4, HEBREW)], query
    assert found(world, "עליכם") == found(world, "עֲלֵיכֶם") == [(5, HEBREW_PLAIN), (4, HEBREW)]
    assert found(world, "בראשית ברא") == found(world, "בְּרֵאשִׁית") == [(6, CANTILLATED)]
    assert found(world, "אלהים") == [(6, CANTILLATED)]
    assert found(world, "مرحبا tea") == []
    assert found(world, "مرحبا", user=world.bob) == []  # nobody else's


def test_indic_vowel_signs_still_tell_words_apart(world):
    session = chat(world)
    say(session, "मुझे केला पसंद है")
    say(session, "यह किला बहुत पुराना है")
    assert fold("केला") != fold("किला")
    assert found(world, "केला") == [(1, "मुझे केला पसंद है")]
    assert found(world, "किला") == [(2, "यह किला बहुत पुराना है")]


def test_the_word_found_is_marked_whole_with_its_points_and_tatweel():
    def marked(text, query):
        return [text[a:b] for a, b in hit_spans(text, message_terms(query))]

    assert marked(POINTED, "مرحبا") == ["مَرْحَبًا"]
    assert marked(POINTED, "مرحبا القاهرة") == ["مَرْحَبًا", "القَاهِرَةِ"]
    assert marked(PLAIN, "مَرْحَبًا") == ["مرحبا"]
    assert marked(STRETCHED, "مرحبا") == ["مـــرحبا"]
    assert marked(HEBREW, "שלום") == ["שָׁלוֹם"]
    assert marked(CANTILLATED, "בראשית") == ["בְּרֵאשִׁ֖ית"]
    assert marked(PRESENTATION, "שלום") == ["\ufb2aלום"]
    # A tatweel before the word's first letter (as a suffix is written alone: "ـها") is
    # the word's, not a letter before it that would make the match the inside of a word.
    assert marked("قال ـمرحبا يا", "مرحبا") == ["ـمرحبا"]
    assert marked("ـمرحبا", "مرحبا") == ["ـمرحبا"]
    assert marked("بمرحبا مرحبا", "مرحبا") == ["مرحبا"]  # inside a word, as before: not marked


def test_the_chat_pages_search_marks_the_pointed_word_whole(client, world):
    from tests.channels_app.test_history_search import SEARCH, _marked

    say(chat(world), "قال لي " + POINTED + " ثم ذهب")
    client.force_login(world.alice)
    body = client.get(SEARCH, {"q": "مرحبا"}).json()
    assert body["terms"] == ["مرحبا"]
    (hit,) = body["results"]
    assert _marked(hit["snippet"], hit["marks"]) == ["مَرْحَبًا"]
    say(chat(world), HEBREW)
    (hit,) = client.get(SEARCH, {"q": "שלום"}).json()["results"]
    assert _marked(hit["snippet"], hit["marks"]) == ["שָׁלוֹם"]


def test_the_search_command_finds_a_pointed_word_typed_unpointed(world):
    from sessions_app.search_lines import search_answer

    session = chat(world)
    say(session, POINTED)
    say(session, "Alice likes tea")
    answer = search_answer(session=session, args="مرحبا", trust="paired")
    assert "مَرْحَبًا" in answer and "tea" not in answer
    assert "שָׁלוֹם" not in search_answer(session=session, args="שלום", trust="paired")
    say(session, HEBREW)
    assert "שָׁלוֹם" in search_answer(session=session, args="שלום", trust="paired")


def test_memories_are_found_with_or_without_their_points(world):
    pointed = remember(world.tenant_a, world.qor_a, world.alice, "صديقي " + POINTED)
    plain = remember(world.tenant_a, world.qor_a, world.alice, "Alice's greeting: " + PLAIN)
    hebrew = remember(world.tenant_a, world.qor_a, world.alice, HEBREW)
    remember(world.tenant_a, world.qor_a, world.alice, "Alice likes tea")
    remember(world.tenant_a, world.qor_a, world.bob, PLAIN)

    def search(query, user=world.alice):
        return memory_search(tenant=world.tenant_a, qor=world.qor_a, user=user, query=query, limit=5)

    for query in ["مرحبا", "مَرْحَبًا", "مـــرحبا", "القَاهِرَة"]:
        assert set(search(query)) == {pointed, plain}, query
    assert search("שלום") == search("\ufb2aלום") == [hebrew]
    hebrew_plain = remember(world.tenant_a, world.qor_a, world.alice, HEBREW_PLAIN)
    assert set(search("שָׁלוֹם")) == {hebrew, hebrew_plain}
    assert Memory.objects.get(pk=hebrew_plain.pk).search_text is None  # nothing kept twice
    assert [m.content for m in search("مرحبا", user=world.bob)] == [PLAIN]
    # A turn's retrieval reads the person's message the same way.
    lines = memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="مرحبا!")
    assert sorted(line.split(" — ", 1)[1] for line in lines) == sorted([pointed.content, plain.content])


# What the search drops, and a reader does not see as another word (sessions_app.fulltext.POINTS).
HEBREW_POINTS = [*range(0x0591, 0x05BE), 0x05BF, 0x05C1, 0x05C2, 0x05C4, 0x05C5, 0x05C7]
ARABIC_SIGNS = [*range(0x0610, 0x061B), 0x0640, *range(0x064B, 0x0660), 0x0670, *range(0x06D6, 0x06DD),
                *range(0x06DF, 0x06E9), *range(0x06EA, 0x06EE)]


def test_the_points_dropped_are_arabic_and_hebrew_alone():
    from sessions_app.fulltext import ARABIC_FROM, ARABIC_TO, POINTS
    from sessions_app.unicode_marks import MARK

    assert sorted(map(ord, POINTS)) == sorted(HEBREW_POINTS + ARABIC_SIGNS)
    for code in HEBREW_POINTS + ARABIC_SIGNS:
        assert fold("ب" + chr(code) + "ت") == "بت", hex(code)
    # Every other mark is kept in its word as before (Indic vowel signs, viramas, nuktas...),
    # and so are Hebrew and Arabic punctuation and symbols, and the letters (but the
    # spellings of one letter: test_search_arabic_letters).
    marks = re.compile(MARK)
    spelled = dict(zip(ARABIC_FROM, ARABIC_TO))
    for code in range(0x0590, 0x0700):
        if code not in HEBREW_POINTS + ARABIC_SIGNS and unicodedata.category(chr(code))[0] in "LNPS":
            assert fold(chr(code)) == spelled.get(chr(code), chr(code).lower()), hex(code)
    for code in range(0x0700, sys.maxunicode + 1):
        char = chr(code)
        if marks.fullmatch(char):
            assert fold("a" + char) == unicodedata.normalize("NFC", "a" + char), hex(code)


def test_a_text_composed_to_hold_a_point_or_an_arabic_letter_searched_as_another_is_rewritten():
    """The migrations rewrite the entries of the messages and memories whose text holds a
    character CHANGED names: every one whose composed form (NFC, as the index reads it)
    holds a point or an Arabic letter searched as another (sessions_app.fulltext.ARABIC_FROM),
    the Hebrew letters written with theirs as one character included."""
    import importlib

    from sessions_app.fulltext import ARABIC_FROM, POINTS

    migration = importlib.import_module(f"sessions_app.migrations.{MIGRATION[1]}")
    changed = re.compile(migration.CHANGED)
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if 0xD800 <= code <= 0xDFFF:
            continue
        if any(c in POINTS + ARABIC_FROM for c in unicodedata.normalize("NFC", char)):
            assert changed.fullmatch(char), hex(code)
    # And a letter with a mark NFC writes as one of them ("ا" and a hamza typed after it).
    assert changed.search("\u0627\u0654") and changed.search("\u06d5\u0654")


MIGRATION = ("sessions_app", "0020_message_search_arabic_hebrew")
BEFORE = ("sessions_app", "0019_message_search_marks_in_words")
MEMORIES = ("memory_app", "0012_memory_search_arabic_hebrew")
MEMORIES_BEFORE = ("memory_app", "0011_memory_search_marks_in_words")
# Arabic written in the spellings of its letters a reader takes for one (test_search_arabic_letters).
SPELLED = "ذهبت إلى مدرسة جديدة مع أحمد، قرأت القرآن و کتاب ٱللَّه ا\u0654حمد خانۀ ہ ۂ ے"
SCHOOL = "ذهبت إلى مدرسة جديدة"  # no point in it, only letters searched as others
SAMPLES = [POINTED, PLAIN, STRETCHED, HEBREW, CANTILLATED, PRESENTATION, SPELLED, "Alice likes tea", "naïve café",
           "주간회의 준비", "我昨天吃了寿司", "λόγος", "मुझे केला पसंद है", "ﾃﾞﾊﾟｰﾄ x\u0301", "ก\u0640ข",
           unicodedata.normalize("NFD", "שָׁלוֹם καλημέρα"), "a" + "\u0301\u0316" * 40 + " \u05b0\u05b8" * 40,
           "ש" + "\u05b0\u05b8\u0591" * 40 + "לום"]


def test_the_migration_indexes_as_the_search_text_does():
    """Migration 0020 (and memory_app's 0012, which reads it) writes stored messages'
    search text with a copy of sessions_app.fulltext kept as it was written: the two agree."""
    import importlib

    from sessions_app import fulltext

    migration = importlib.import_module(f"sessions_app.migrations.{MIGRATION[1]}")
    assert migration.POINTS == fulltext.POINTS
    assert (migration.ARABIC_FROM, migration.ARABIC_TO) == (fulltext.ARABIC_FROM, fulltext.ARABIC_TO)
    point = re.compile(migration.POINT)  # the escapes PostgreSQL's function drops
    assert "".join(c for c in map(chr, range(0x10000)) if point.fullmatch(c)) == fulltext.POINTS
    letter = re.compile(migration.ARABIC_LETTER)  # the escapes PostgreSQL's function looks for
    assert "".join(c for c in map(chr, range(0x10000)) if letter.fullmatch(c)) == "".join(sorted(fulltext.ARABIC_FROM))
    for text in SAMPLES:
        assert migration.search_text(text) == (search_text(text) or text), text


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's function; SQLite's is search_text itself")
def test_postgresql_drops_the_points_and_spells_arabic_letters_as_search_text_does():
    from sessions_app.fulltext import ARABIC_FROM, POINTS

    with connection.cursor() as cursor:
        for text in [POINTED, STRETCHED, HEBREW, CANTILLATED, PRESENTATION, SPELLED, "ب" + POINTS + "ت",
                     "ب" + ARABIC_FROM + "ت", " ".join("ب" + c for c in ARABIC_FROM), "\u0627\u0653\u0654\u0655",
                     " ".join("ب" + c for c in POINTS), unicodedata.normalize("NFD", "שָׁלוֹם καλημέρα"), SAMPLES[-1]]:
            cursor.execute("SELECT message_search_text(%s)", [text])
            assert cursor.fetchone()[0] == search_text(text), text
        # The same words (Chinese and Korean are spaced otherwise; half-width katakana, which
        # the function keeps, are searched in both widths: sessions_app.search).
        for text in [t for t in SAMPLES if "ﾃ" not in t]:
            cursor.execute("SELECT to_tsvector('english', message_search_text(%s)) = to_tsvector('english', %s)",
                           [text, search_text(text) or text])
            assert cursor.fetchone()[0], text


def _through_the_index(word: str) -> int:
    """PostgreSQL: how many messages the GIN index itself gives for `word` (a table this small
    is otherwise scanned, every row's text read again through the function as it is now)."""
    from django.db import transaction

    query = ("SELECT count(*) FROM sessions_app_message WHERE role IN ('user', 'assistant')"
             " AND to_tsvector('english'::regconfig, message_search_text(content)) @@ plainto_tsquery('english', %s)")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("EXPLAIN " + query, [word])
        assert "message_search_text_gin" in " ".join(row[0] for row in cursor.fetchall())
        cursor.execute(query, [word])
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_messages_written_before_the_migration_are_found_by_their_unpointed_words_after_it(world, schema,
                                                                                         monkeypatch):
    import importlib

    from django.core import checks

    schema.to([BEFORE])
    session = chat(world)
    for text in [POINTED, STRETCHED, HEBREW, PRESENTATION, "Alice likes tea", "我昨天吃了寿司", "naïve café", SCHOOL]:
        say(session, text)
    say(chat(world, user=world.bob), HEBREW)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":  # as the version before indexed them: the points kept
            cursor.execute(f"UPDATE {SEARCH_TABLE} SET content = (SELECT content FROM sessions_app_message m"
                           f" WHERE m.id = {SEARCH_TABLE}.rowid) WHERE rowid IN (SELECT id FROM sessions_app_message"
                           " WHERE content NOT LIKE %s AND content NOT LIKE %s)", ["%寿%", "%café%"])
        else:
            cursor.execute("SELECT message_search_text(%s)", [HEBREW])
            assert cursor.fetchone()[0] == HEBREW
    assert found(world, "مرحبا") == found(world, "שלום") == found(world, "مدرسه") == []
    migration = importlib.import_module(f"sessions_app.migrations.{MIGRATION[1]}")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    schema.to([MIGRATION])
    assert found(world, "مرحبا") == [(2, STRETCHED), (1, POINTED)]
    if connection.vendor == "postgresql":
        assert _through_the_index("مرحبا") == 2  # its entries were written again, not only the function
        assert _through_the_index("مدرسه") == 1
    assert found(world, "مدرسه") == found(world, "الى") == [(8, SCHOOL)]
    assert found(world, "שלום") == [(4, PRESENTATION), (3, HEBREW)]
    assert found(world, "tea") == [(5, "Alice likes tea")]
    assert found(world, "寿司") == [(6, "我昨天吃了寿司")]
    assert found(world, "cafe") == [(7, "naïve café")]
    assert found(world, "שלום", user=world.bob) == [(1, HEBREW)]
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
    say(session, "שָׁלוֹם again")  # written after it: indexed the same way
    assert [seq for seq, _ in found(world, "שלום")] == [9, 4, 3]
    schema.to([BEFORE])  # and back: indexed as before
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"SELECT content FROM {SEARCH_TABLE} ORDER BY rowid")
            assert [row[0] for row in cursor.fetchall()][:3] == [POINTED, STRETCHED, HEBREW]
        else:
            cursor.execute("SELECT message_search_text(%s)", [HEBREW])
            assert cursor.fetchone()[0] == HEBREW
    assert found(world, "مرحبا") == found(world, "שלום") == found(world, "مدرسه") == []
    assert found(world, "tea") == [(5, "Alice likes tea")]
    assert found(world, "cafe") == [(7, "naïve café")]


@pytest.mark.django_db(transaction=True)
def test_memories_stored_before_the_migration_are_found_by_their_unpointed_words_after_it(world, schema,
                                                                                        monkeypatch):
    import importlib

    from django.core import checks

    from tests.memory_app.test_search import indexed_texts

    texts = (POINTED, HEBREW, "Alice likes tea", "我喜欢寿司", "naïve café", STRETCHED, SCHOOL)
    memories = [remember(world.tenant_a, world.qor_a, world.alice, text) for text in texts]
    bob = remember(world.tenant_a, world.qor_a, world.bob, HEBREW)
    schema.to([MEMORIES_BEFORE])
    # As the version before stored them: the points kept (no search text unless another letter needed one).
    Memory.objects.filter(content__in=[POINTED, HEBREW, STRETCHED, SCHOOL]).update(search_text=None)
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("UPDATE memory_app_memory_fts SET content = (SELECT content FROM memory_app_memory m"
                           " WHERE m.id = memory_app_memory_fts.rowid)"
                           " WHERE rowid IN (SELECT id FROM memory_app_memory WHERE search_text IS NULL)")
    assert any("שָׁלוֹם" in text for text in indexed_texts())

    def search(query, user=world.alice):
        return memory_search(tenant=world.tenant_a, qor=world.qor_a, user=user, query=query, limit=5)

    assert search("مرحبا") == search("שלום") == search("مدرسه") == []
    migration = importlib.import_module(f"memory_app.migrations.{MEMORIES[1]}")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    schema.latest()
    assert set(search("مرحبا")) == {memories[0], memories[5]}
    assert search("שלום") == [memories[1]]
    assert search("مدرسه") == search("الى") == [memories[6]]
    assert search("tea") == [memories[2]]
    assert search("寿司") == [memories[3]]
    assert search("cafe") == [memories[4]]
    assert search("שלום", user=world.bob) == [bob]
    assert Memory.objects.get(pk=memories[2].pk).search_text is None
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
    schema.to([MEMORIES_BEFORE])  # and back: as before
    assert Memory.objects.get(pk=memories[1].pk).search_text is None
    assert search("שלום") == search("مرحبا") == search("مدرسه") == []
    assert search("寿司") == [memories[3]]
