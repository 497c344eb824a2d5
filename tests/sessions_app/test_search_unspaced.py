"""History search in languages written without spaces between words (Chinese, Japanese,
Thai) and in Korean, whose words carry their particles: a word inside a sentence is
found, on both databases, and never in anyone else's messages."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.migrations._trigger import SEARCH_TABLE
from sessions_app.models import Message, Session
from sessions_app.fulltext import message_terms
from sessions_app.search import hit_spans, message_search
from tests.factories.tenancy import QorFactory

from .older_versions import said_before, state_at
from .test_search import chat, found, say

HISTORY = 5_000  # messages of the person's before the ones searched for


def test_a_chinese_word_is_found_inside_a_sentence(world):
    session = chat(world)
    say(session, "我昨天吃了寿司")
    say(session, "寿司很好吃，但是太贵了", role="assistant")
    say(session, "明天要去医院")
    assert found(world, "寿司") == [(2, "寿司很好吃，但是太贵了"), (1, "我昨天吃了寿司")]
    assert found(world, "医院") == [(3, "明天要去医院")]
    assert found(world, "猫") == []
    assert found(world, "吃") == [(2, "寿司很好吃，但是太贵了"), (1, "我昨天吃了寿司")]  # a word of one letter
    assert found(world, "拉面") == []
    assert found(world, "司寿") == []  # the letters, but not in this order
    assert found(world, "吃寿司") == []  # a run typed is found as typed, letters next to each other
    assert found(world, "吃了寿司") == [(1, "我昨天吃了寿司")]


def test_every_word_typed_must_occur_in_chinese_too(world):
    session = chat(world)
    say(session, "我昨天吃了寿司")
    say(session, "我昨天吃了拉面和寿司")
    assert found(world, "寿司 拉面") == [(2, "我昨天吃了拉面和寿司")]
    assert found(world, "寿司，昨天") == [(2, "我昨天吃了拉面和寿司"), (1, "我昨天吃了寿司")]
    assert found(world, "寿司 医院") == []


def test_japanese_is_found_by_its_words_in_kanji_katakana_and_hiragana(world):
    session = chat(world)
    say(session, "私は昨日東京タワーに行きました")
    say(session, "どうもありがとうございました", role="assistant")
    say(session, "寿司が大好きです")
    assert found(world, "東京") == [(1, "私は昨日東京タワーに行きました")]
    assert found(world, "タワー") == [(1, "私は昨日東京タワーに行きました")]
    assert found(world, "行きました") == [(1, "私は昨日東京タワーに行きました")]
    assert found(world, "ありがとう") == [(2, "どうもありがとうございました")]
    assert found(world, "寿司") == [(3, "寿司が大好きです")]
    assert found(world, "ラーメン") == []


def test_thai_is_found_by_its_words(world):
    session = chat(world)
    say(session, "ฉันชอบกินซูชิมาก")
    say(session, "แมวของฉันชื่อมิโซะ", role="assistant")
    assert found(world, "ซูชิ") == [(1, "ฉันชอบกินซูชิมาก")]
    assert found(world, "แมว") == [(2, "แมวของฉันชื่อมิโซะ")]
    assert found(world, "ฉัน") == [(2, "แมวของฉันชื่อมิโซะ"), (1, "ฉันชอบกินซูชิมาก")]
    assert found(world, "ทุเรียน") == []


def test_a_korean_word_is_found_with_its_particle(world):
    session = chat(world)
    say(session, "어제 스시를 먹었어요")
    say(session, "스시는 맛있어요", role="assistant")
    say(session, "라멘이 더 좋아요")
    assert found(world, "스시") == [(2, "스시는 맛있어요"), (1, "어제 스시를 먹었어요")]
    # Typed with a particle, the word is searched without it: any particle finds it.
    assert found(world, "스시를") == [(2, "스시는 맛있어요"), (1, "어제 스시를 먹었어요")]
    assert found(world, "라멘") == [(3, "라멘이 더 좋아요")]
    assert found(world, "라멘이") == [(3, "라멘이 더 좋아요")]
    assert found(world, "시") == []  # one syllable: the start of a word, not any part of it


KOREAN = ["회의록을 보냈어요", "내일 회의는 10시예요", "회의를 취소했어요", "주간회의 준비", "팀회의에서 봐요",
          "집에 가요", "우리 집", "수집가가 왔어요", "편집했어요"]


def test_a_korean_word_is_found_inside_a_compound_and_with_any_particle(world):
    """Korean writes a noun's particle onto it (회의는, 회의를) and compounds as one word
    (주간회의: the weekly meeting; 회의록: the minutes of one): a word of two syllables or
    more is found inside the words that hold it, as CJK words are inside a sentence. A
    syllable alone (집) is found at the start of a word only: inside one (수집, 편집) it is
    most often part of another word."""
    session = chat(world)
    for text in KOREAN:
        say(session, text)
    meetings = [(5, KOREAN[4]), (4, KOREAN[3]), (3, KOREAN[2]), (2, KOREAN[1]), (1, KOREAN[0])]
    for query in ["회의", "회의는", "회의를", "회의에서"]:
        assert found(world, query) == meetings, query
    assert found(world, "회의록") == [(1, KOREAN[0])]
    assert found(world, "주간회의") == [(4, KOREAN[3])]
    assert found(world, "집") == [(7, KOREAN[6]), (6, KOREAN[5])]
    assert found(world, "집에") == [(6, KOREAN[5])]
    assert found(world, "수집") == [(8, KOREAN[7])]
    assert found(world, "회의 준비") == [(4, KOREAN[3])]  # every word must occur, Korean too
    text = KOREAN[3]
    assert [text[a:b] for a, b in hit_spans(text, message_terms("회의를"))] == ["회의"]


def test_english_beside_chinese_is_found_as_before(world):
    session = chat(world)
    say(session, "Alice的passport号码是4471")
    say(session, "Alice renewed her passport in March")
    say(session, "the lease ends in March")
    assert found(world, "passport") == [(2, "Alice renewed her passport in March"), (1, "Alice的passport号码是4471")]
    assert found(world, "passports 号码") == [(1, "Alice的passport号码是4471")]
    assert found(world, "4471") == [(1, "Alice的passport号码是4471")]
    assert found(world, "leases march") == [(3, "the lease ends in March")]
    assert found(world, "march") == [(3, "the lease ends in March"), (2, "Alice renewed her passport in March")]


def test_a_chinese_japanese_thai_or_korean_search_never_crosses_people_qors_or_tenants(world):
    words = ["备用钥匙在蓝色花盆下面", "鍵は植木鉢の下にあります", "กุญแจอยู่ใต้กระถาง", "열쇠를 화분 밑에 두었어요"]
    other_qor = QorFactory(tenant=world.tenant_a, slug="scribe", is_default=False)
    from sessions_app.services.resolve import session_resolve

    for text in words:
        say(chat(world, user=world.bob), text)
        say(chat(world, qor=other_qor), text)
        say(session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie), text)
    for query in ["钥匙", "植木鉢", "กุญแจ", "열쇠"]:
        assert found(world, query) == [], query
        assert message_search(tenant=world.tenant_a, qor=world.qor_b, user=world.charlie, query=query) == []
        assert [h.content for h in message_search(
            tenant=world.tenant_b, qor=world.qor_b, user=world.charlie, query=query)] != [], query
    mine = say(chat(world), words[0])
    assert found(world, "钥匙") == [(mine.seq, words[0])]


@pytest.mark.parametrize("query", [
    '寿司" OR owner : *', "寿*司", "NEAR(寿 司)", 'content:寿司 AND "', "寿司'; DROP TABLE x; --", "「寿司」",
    "스시*", "스시' | '", "寿" * 200,
])
def test_unspaced_and_korean_text_is_never_read_as_search_syntax(world, query):
    say(chat(world), "我喜欢寿司 스시를")
    say(chat(world, user=world.bob), "Bob也喜欢寿司 스시를")
    hits = message_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query=query)
    assert all(h.content == "我喜欢寿司 스시를" for h in hits)
    if query in ("「寿司」", "스시*", "寿*司"):  # the words in them, and nothing else
        assert [h.content for h in hits] == ["我喜欢寿司 스시를"]


def test_edited_and_deleted_chinese_messages_follow_in_the_index(world):
    message = say(chat(world), "我昨天吃了寿司")
    Message.objects.filter(pk=message.pk).update(content="我昨天吃了拉面")
    assert found(world, "寿司") == [] and found(world, "拉面") == [(1, "我昨天吃了拉面")]
    Message.objects.filter(pk=message.pk).delete()
    assert found(world, "拉面") == []


@pytest.mark.django_db(transaction=True)  # committed, then emptied: PostgreSQL's statistics as the next tests expect
def test_a_search_reads_the_full_text_index_not_the_persons_whole_history(world):
    """On PostgreSQL the query repeats the expression of migration 0010's index, so the
    planner can use it; on SQLite the FTS5 table is read, each hit's row by id."""
    session = chat(world)
    numbers = ("SELECT n FROM generate_series(1, %s) n" if connection.vendor == "postgresql" else
               "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < %s) SELECT n FROM c")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sessions_app_message (tenant_id, session_id, seq, role, content, channel, sender_name,"
            " created_at, external_scope, external_id, tool_call_id, metadata)"
            " SELECT %s, %s, n, 'user', 'an ordinary day at work ' || n, 'web', '', CURRENT_TIMESTAMP, '', '', '',"
            f" '{{}}' FROM ({numbers}) numbers", [world.tenant_a.pk, session.pk, HISTORY])
    Session.objects.filter(pk=session.pk).update(last_seq=HISTORY)  # as appends would have left it
    for text in ["我昨天吃了寿司", "私は寿司が好き", "ฉันชอบกินซูชิ", "어제 스시를 먹었어요", "the orchid needs water"]:
        say(session, text)
    try:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        for query, hits in [("寿司", 2), ("ซูชิ", 1), ("스시", 1), ("orchid", 1), ("寿司 orchid", 0)]:
            with CaptureQueriesContext(connection) as ctx:
                assert len(message_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query=query)) == hits
            (sql,) = [q["sql"] for q in ctx.captured_queries]
            with connection.cursor() as cursor:
                cursor.execute(("EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN ") + sql)
                plan = " ".join(str(row) for row in cursor.fetchall())
            if connection.vendor == "sqlite":
                assert f"{SEARCH_TABLE} VIRTUAL TABLE INDEX" in plan, plan
                assert "SCAN sessions_app_message " not in plan + " ", plan
            else:
                assert "Bitmap Index Scan on message_search_text_gin" in plan, (query, plan)
                assert "Seq Scan on sessions_app_message" not in plan, plan
                # No phrase (<->): the index would have each candidate's words computed again.
                assert "<->" not in plan, plan
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM sessions_app_message")
            cursor.execute("ANALYZE")


BEFORE = ("sessions_app", "0009_thread_sessions_per_person")
MIGRATION = ("sessions_app", "0010_message_search_text")


@pytest.mark.django_db(transaction=True)
def test_messages_written_before_the_migration_are_found_after_it(world, schema, monkeypatch):
    import importlib

    from django.core import checks

    before = state_at(schema, BEFORE)
    session = chat(world)  # written by the version before
    for text in ["我昨天吃了寿司", "Alice likes tea", "東京タワーに行った", "ฉันชอบกินซูชิ", "寿司很好吃"]:
        said_before(before, session, text)
    said_before(before, chat(world, user=world.bob), "Bob也喜欢寿司")
    with connection.cursor() as cursor:  # as it was: each sentence one word to the index
        if connection.vendor == "sqlite":
            cursor.execute(f"SELECT content FROM {SEARCH_TABLE} WHERE content LIKE %s", ["%寿%"])
            assert sorted(row[0] for row in cursor.fetchall()) == ["Bob也喜欢寿司", "寿司很好吃", "我昨天吃了寿司"]
        else:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'message_search%%'")
            assert [row[0] for row in cursor.fetchall()] == ["message_search_gin"]
    migration = importlib.import_module("sessions_app.migrations.0010_message_search_text")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    schema.to([MIGRATION])
    assert found(world, "寿司") == [(5, "寿司很好吃"), (1, "我昨天吃了寿司")]
    assert found(world, "タワー") == [(3, "東京タワーに行った")]
    assert found(world, "ซูชิ") == [(4, "ฉันชอบกินซูชิ")]
    assert found(world, "tea") == [(2, "Alice likes tea")]
    assert found(world, "寿司", user=world.bob) == [(1, "Bob也喜欢寿司")]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'message_search%%'")
            assert [row[0] for row in cursor.fetchall()] == ["message_search_text_gin"]
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []


def _other_connection():
    import psycopg

    s = connection.settings_dict
    return psycopg.connect(host=s["HOST"] or None, port=s["PORT"] or None, user=s["USER"] or None,
                           password=s["PASSWORD"] or None, dbname=s["NAME"], autocommit=True)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's index build and its locks")
@pytest.mark.django_db(transaction=True)
def test_messages_are_written_while_the_migration_builds_its_index(world, schema):
    """A plain CREATE INDEX would hold every append (and the streaming of every reply)
    until it had read the whole table: the index is built concurrently."""
    import threading
    import time

    from django.db import connections

    session = chat(world)
    say(session, "我昨天吃了寿司")
    before = state_at(schema, BEFORE)
    failures: list[BaseException] = []

    def migrate() -> None:
        try:
            schema.to([MIGRATION])
        except BaseException as error:  # noqa: BLE001  reported by the test's thread
            failures.append(error)
        finally:
            connections.close_all()

    builder = threading.Thread(target=migrate)
    with _other_connection() as turn, _other_connection() as watcher:
        # A turn in the middle of its transaction: the build waits for it to end.
        turn.execute("BEGIN")
        turn.execute("UPDATE sessions_app_session SET last_seq = last_seq WHERE id = %s", [session.pk])
        turn.execute("UPDATE sessions_app_message SET content = content WHERE session_id = %s", [session.pk])
        builder.start()
        deadline = time.monotonic() + 30
        while not watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND query LIKE 'CREATE INDEX %%message_search_text_gin%%' AND wait_event_type = 'Lock'"
        ).fetchone()[0]:
            assert time.monotonic() < deadline and builder.is_alive(), failures
            time.sleep(0.05)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # a blocked append fails instead of waiting
        try:
            written = said_before(before, chat(world, user=world.bob), "我今天也吃了寿司")
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        turn.execute("COMMIT")
    builder.join()
    assert failures == []
    assert found(world, "寿司") == [(1, "我昨天吃了寿司")]
    assert found(world, "寿司", user=world.bob) == [(written.seq, "我今天也吃了寿司")]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's function; SQLite's is search_text itself")
def test_postgresql_spaces_out_the_letters_as_search_text_does(world):
    """Every letter of the scripts written without spaces is a word of its own to
    PostgreSQL's index as to SQLite's, in the same places, marks dropped alike; English
    text is left as it was but for its accents, so its index entries and its results are
    as before."""
    import re
    import unicodedata

    from sessions_app.fulltext import UNSPACED_LETTER, search_text

    letters = [c for c in map(chr, range(0x0E00, 0x30000)) if re.fullmatch(UNSPACED_LETTER, c)]
    letters = [c for c in letters if unicodedata.normalize("NFKC", c) == c]  # PostgreSQL does not normalise
    chunks = ["".join(letters[i:i + 4000]) for i in range(0, len(letters), 4000)]
    chunks += ["Alice的passport号码是4471。", "ฉันชอบกินซูชิ๏ๆ", "ジョン・スミス゛です"]
    with connection.cursor() as cursor:
        for chunk in chunks:
            cursor.execute("SELECT to_tsvector('english', message_search_text(%s)) = to_tsvector('english', %s)",
                           [chunk, search_text(chunk)])
            assert cursor.fetchone()[0], chunk[:20]
        english = "The lease ends in March; naïve café, ﬁle #42 — e-mail: a@b.example"
        cursor.execute("SELECT message_search_text(%s)", [english])
        assert cursor.fetchone()[0] == english.replace("ï", "i").replace("é", "e") == search_text(english)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's concurrent index build")
@pytest.mark.django_db(transaction=True)
def test_an_index_build_interrupted_is_built_again_when_the_migration_runs_again(world, schema):
    """An interrupted CREATE INDEX CONCURRENTLY leaves the index behind, marked invalid:
    IF NOT EXISTS alone would keep it, and no search would ever use it."""
    say(chat(world), "我昨天吃了寿司")
    schema.to([MIGRATION])
    with connection.cursor() as cursor:
        # What an interrupted build leaves (the catalog's own flag; the test runs as a superuser).
        cursor.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'message_search_text_gin'::regclass")
        cursor.execute("DELETE FROM django_migrations WHERE app = 'sessions_app' AND name = %s", [MIGRATION[1]])
    schema.to([MIGRATION])
    with connection.cursor() as cursor:
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = 'message_search_text_gin'::regclass")
        assert cursor.fetchone() == (True,)
    assert found(world, "寿司") == [(1, "我昨天吃了寿司")]
