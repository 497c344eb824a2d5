"""History and memory search in scripts whose words carry vowel signs and other marks
written after their letters (Hindi, Bengali, Tamil and the other Indic scripts; Arabic
and Hebrew with their vowel points): a word typed is found, on both databases, as it is
in English. The words were cut at every mark, and the single letters left were dropped:
"हिन्दी" searched for nothing."""
from __future__ import annotations

import pytest
from django.db import connection

from memory_app.selectors import memory_search
from sessions_app.fulltext import message_terms, search_terms
from sessions_app.search import hit_spans

from ..factories.memory_app import remember
from .test_search import chat, found, say

pytestmark = pytest.mark.django_db

HINDI = "मुझे हिन्दी फ़िल्में पसंद हैं"  # "I like Hindi films"
BENGALI = "আমি বাংলা ভাষায় কথা বলি"  # "I speak in the Bengali language"
TAMIL = "தமிழ் மொழி மிகவும் பழமையானது"  # "The Tamil language is very old"
ARABIC = "مَرْحَبًا بِكُمْ في مدينة القاهرة"  # pointed words, and unpointed ones


def test_the_marks_written_out_are_every_mark_python_knows():
    import re
    import sys
    import unicodedata

    from sessions_app.unicode_marks import MARK

    marks = re.compile(MARK)
    every = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)).startswith("M")]
    assert all(marks.fullmatch(c) for c in every)
    assert sum(1 for c in range(sys.maxunicode + 1) if marks.fullmatch(chr(c))) == len(every)


def test_a_word_with_vowel_signs_is_one_search_term():
    assert search_terms("हिन्दी फ़िल्में") == ["हिन्दी", "फ़िल्में"]
    assert message_terms("বাংলা ভাষায়") == ["বাংলা", "ভাষায়"]
    assert search_terms("தமிழ்") == ["தமிழ்"]
    assert search_terms("مَرْحَبًا") == ["مرحبا"]  # one word, read without its points (test_search_vowel_points.py)


def test_indic_words_are_found_in_the_history(world):
    session = chat(world)
    say(session, HINDI)
    say(session, BENGALI, role="assistant")
    say(session, TAMIL)
    say(session, "Alice likes tea")
    assert found(world, "हिन्दी") == [(1, HINDI)]
    assert found(world, "पसंद फ़िल्में") == [(1, HINDI)]  # every word typed, in any order
    assert found(world, "বাংলা") == [(2, BENGALI)]
    assert found(world, "மொழி") == [(3, TAMIL)]
    assert found(world, "हिन्दी tea") == []
    assert found(world, "हिन्दी", user=world.bob) == []  # nobody else's


def test_arabic_words_are_found_as_written(world):
    session = chat(world)
    say(session, ARABIC)
    assert found(world, "القاهرة") == [(1, ARABIC)]
    assert found(world, "مَرْحَبًا") == [(1, ARABIC)]


def test_the_word_found_is_marked_whole_with_its_vowel_signs():
    assert [HINDI[a:b] for a, b in hit_spans(HINDI, message_terms("हिन्दी"))] == ["हिन्दी"]
    assert [TAMIL[a:b] for a, b in hit_spans(TAMIL, message_terms("தமிழ்"))] == ["தமிழ்"]


def test_indic_memories_are_found(world):
    hindi = remember(world.tenant_a, world.qor_a, world.alice, HINDI)
    tamil = remember(world.tenant_a, world.qor_a, world.alice, TAMIL)
    remember(world.tenant_a, world.qor_a, world.alice, "Alice likes tea")

    def search(query, user=world.alice):
        return memory_search(tenant=world.tenant_a, qor=world.qor_a, user=user, query=query, limit=5)

    assert search("हिन्दी फ़िल्में") == [hindi]
    assert search("தமிழ் மொழி") == [tamil]
    assert search("हिन्दी", user=world.bob) == []


def test_a_word_is_found_by_its_own_vowel_signs_not_by_a_word_of_the_same_letters(world):
    """केला (banana) and किला (fort) differ by their vowel signs alone. SQLite's tokenizer
    took each mark for a space: both were the letters क and ल to it, and either word found
    both."""
    session = chat(world)
    say(session, "मुझे केला पसंद है")
    say(session, "यह किला बहुत पुराना है")
    assert found(world, "केला") == [(1, "मुझे केला पसंद है")]
    assert found(world, "किला") == [(2, "यह किला बहुत पुराना है")]
    fort = remember(world.tenant_a, world.qor_a, world.alice, "Alice visited the किला in Delhi")
    assert memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="केला", limit=5) == []
    assert memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="किला", limit=5) == [fort]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="PostgreSQL's index already reads words so")
@pytest.mark.django_db(transaction=True)
def test_messages_and_memories_stored_before_the_migrations_are_found_by_their_own_words_after_them(
        world, schema, monkeypatch):
    import importlib

    from django.core import checks

    session = chat(world)
    banana, fort = say(session, "मुझे केला पसंद है"), say(session, "यह किला बहुत पुराना है")
    say(session, "我昨天吃了寿司")
    memories = [remember(world.tenant_a, world.qor_a, world.alice, text) for text in ("केला", "किला")]
    remember(world.tenant_a, world.qor_a, world.bob, "केला of Bob")

    def memories_found(query, user=world.alice):
        return memory_search(tenant=world.tenant_a, qor=world.qor_a, user=user, query=query, limit=5)

    schema.to([("sessions_app", "0018_message_search_stream_safe"), ("memory_app", "0010_memory_search_accents_korean")])
    assert found(world, "केला") == [(fort.seq, fort.content), (banana.seq, banana.content)]  # as before: either
    assert set(memories_found("केला")) == set(memories)
    # Several batches (memory_app 0011 makes its table with history search's function).
    monkeypatch.setattr(importlib.import_module("sessions_app.migrations.0019_message_search_marks_in_words"),
                        "BATCH", 2)
    schema.latest()
    assert found(world, "केला") == [(banana.seq, banana.content)]
    assert found(world, "寿司") == [(3, "我昨天吃了寿司")]
    assert memories_found("केला") == [memories[0]]
    assert [m.content for m in memories_found("केला", user=world.bob)] == ["केला of Bob"]
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
    say(session, "केला और किला")  # the triggers index what is written after it
    assert [seq for seq, _ in found(world, "केला")] == [4, banana.seq]
