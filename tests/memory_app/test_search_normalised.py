"""memory_search reads a word the same whichever of its written forms is typed: Greek with
or without accents, in capitals, with its final sigma (ς) or the ordinary one (σ); letters
and digits full-width or not; a Korean word with the particle written onto it. On both
databases alike."""
from __future__ import annotations

import unicodedata

import pytest

from memory_app.models import Memory
from memory_app.services import memory_update

from ..factories.memory_app import remember
from .test_search import indexed_texts, search

pytestmark = pytest.mark.django_db


def test_greek_is_found_whatever_its_final_sigma_accents_and_capitals(world):
    word = remember(world.tenant_a, world.qor_a, world.alice, "Ο λόγος του ήταν σαφής")
    capitals = remember(world.tenant_a, world.qor_a, world.alice, "ΛΟΓΟΣ ΚΑΙ ΠΡΑΞΗ")
    remember(world.tenant_a, world.qor_a, world.alice, "Η θάλασσα είναι ήσυχη")
    for query in ["λόγος", "λογοσ", "λογος", "ΛΟΓΟΣ", "Λόγος"]:
        assert set(search(world, query)) == {word, capitals}, query
    assert search(world, "ΣΑΦΗΣ") == [word]
    assert search(world, "πράξη") == [capitals]
    assert search(world, "θαλασσα ησυχη")[0].content == "Η θάλασσα είναι ήσυχη"


def test_greek_typed_with_combining_accents_is_the_greek_typed_with_accented_letters(world):
    combining = remember(world.tenant_a, world.qor_a, world.alice, unicodedata.normalize("NFD", "Ο κόσμος είναι μικρός"))
    precomposed = remember(world.tenant_a, world.qor_a, world.alice, "Κόσμος και λόγος")
    for query in ["κόσμος", unicodedata.normalize("NFD", "κόσμος"), "κοσμοσ", "ΚΟΣΜΟΣ"]:
        assert set(search(world, query)) == {combining, precomposed}, ascii(query)
    assert search(world, unicodedata.normalize("NFD", "μικρός")) == [combining]


def test_latin_accents_are_ignored_on_both_databases_alike(world):
    cafe = remember(world.tenant_a, world.qor_a, world.alice, "Alice's favourite café is in Zürich")
    plain = remember(world.tenant_a, world.qor_a, world.alice, "The cafe near the office opens at seven")
    muller = remember(world.tenant_a, world.qor_a, world.alice, unicodedata.normalize("NFD", "Dr. Müller is her dentist"))
    for query in ["café", "cafe", "CAFÉ", unicodedata.normalize("NFD", "café")]:
        assert set(search(world, query)) == {cafe, plain}, ascii(query)
    assert search(world, "zurich") == [cafe]
    assert search(world, "Muller") == search(world, "müller") == [muller]


def test_full_width_letters_and_digits_are_the_letters_and_digits_they_show(world):
    office = remember(world.tenant_a, world.qor_a, world.alice, "Ｔｏｋｙｏの会議室はＲｏｏｍ　４０２")
    plain = remember(world.tenant_a, world.qor_a, world.alice, "Alice's desk is in room 518")
    assert search(world, "tokyo") == [office]
    assert search(world, "402") == [office]
    assert search(world, "ｒｏｏｍ ５１８")[0] == plain


def test_a_korean_word_is_found_with_its_particle(world):
    seoul = remember(world.tenant_a, world.qor_a, world.alice, "앨리스는 서울에서 살아요")
    sushi = remember(world.tenant_a, world.qor_a, world.alice, "스시를 제일 좋아해요")
    assert search(world, "서울") == [seoul]
    assert search(world, "서울에서") == [seoul]
    assert search(world, "스시") == [sushi]
    assert search(world, "어디 살아요?") == [seoul]
    assert search(world, "서울은") == [seoul]  # typed with another particle
    assert search(world, "울") == []  # one syllable: the start of a word, not any part of it


def test_a_korean_word_is_found_inside_a_compound(world):
    weekly = remember(world.tenant_a, world.qor_a, world.alice, "주간회의는 월요일 아침이에요")
    minutes = remember(world.tenant_a, world.qor_a, world.alice, "회의록은 팀 폴더에 있어요")
    remember(world.tenant_a, world.qor_a, world.alice, "앨리스는 서울에서 살아요")
    assert set(search(world, "회의")) == {weekly, minutes}
    assert set(search(world, "회의는 언제예요?")) == {weekly, minutes}
    assert search(world, "주간회의") == [weekly]


def test_a_korean_word_of_one_syllable_is_found(world):
    """집 (home), 책 (book), 차 (car): one syllable is a whole word in Korean, where an
    English letter alone is not."""
    home = remember(world.tenant_a, world.qor_a, world.alice, "앨리스의 집은 부산에 있어요")
    book = remember(world.tenant_a, world.qor_a, world.alice, "책을 빌려줬어요")
    remember(world.tenant_a, world.qor_a, world.alice, "우표 수집가예요")
    assert search(world, "집") == [home]
    assert search(world, "책") == [book]
    assert search(world, "집?") == [home]
    # Beside longer words, a syllable alone is mostly grammar (이, 그, 저) and is left out.
    assert search(world, "부산 그 집") == [home]


def test_english_is_found_and_ranked_as_before(world):
    lease = remember(world.tenant_a, world.qor_a, world.alice, "The lease on the flat ends in March")
    cafe = remember(world.tenant_a, world.qor_a, world.alice, "Alice's favourite café is in Zürich")
    assert search(world, "leases") == [lease]
    assert search(world, "café Zürich") == [cafe]
    assert Memory.objects.get(pk=lease.pk).search_text is None  # nothing kept twice


def test_an_edit_keeps_the_normalised_index_in_step(world):
    memory = remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Tokyo")
    memory_update(memory=memory, content="Η Αλίκη ζει στην ΑΘΗΝΑ")
    assert search(world, "tokyo") == []
    assert search(world, "αθηνα") == [memory]
    assert search(world, "Αλικη") == [memory]


@pytest.mark.django_db(transaction=True)
def test_memories_stored_before_the_migration_are_found_after_it(world, schema, monkeypatch):
    import importlib

    from django.core import checks
    from django.db import connection

    texts = ("Ο λόγος του ήταν σαφής", "Alice likes tea", "Ｔｏｋｙｏ　４０２", "我喜欢寿司", "ΛΟΓΟΣ ΚΑΙ ΠΡΑΞΗ")
    memories = [remember(world.tenant_a, world.qor_a, world.alice, text) for text in texts]
    bob = remember(world.tenant_a, world.qor_a, world.bob, "Ο λόγος του Bob")
    schema.to([("memory_app", "0008_memory_search_text")])
    # As the version before stored them: the text as written, unless it held Chinese.
    Memory.objects.exclude(content__contains="寿").update(search_text=None)
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("UPDATE memory_app_memory_fts SET content = (SELECT content FROM memory_app_memory m"
                           " WHERE m.id = memory_app_memory_fts.rowid) WHERE content NOT LIKE %s", ["%寿%"])
    assert any("λόγος" in text for text in indexed_texts())
    migration = importlib.import_module("memory_app.migrations.0009_memory_search_normalised")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    schema.latest()
    assert set(search(world, "λογοσ")) == {memories[0], memories[4]}
    assert search(world, "tokyo 402") == [memories[2]]
    assert search(world, "tea") == [memories[1]]
    assert search(world, "寿司") == [memories[3]]
    assert search(world, "ΛΟΓΟΣ", user=world.bob) == [bob]
    assert Memory.objects.get(pk=memories[1].pk).search_text is None
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []


@pytest.mark.django_db(transaction=True)
def test_memories_stored_before_the_accents_and_korean_migration_are_found_after_it(world, schema, monkeypatch):
    import importlib

    from django.core import checks
    from django.db import connection

    texts = ("naïve café owners", "주간회의는 월요일", unicodedata.normalize("NFD", "καλημέρα κόσμε"), "Alice likes tea",
             "我喜欢寿司", "λόγος και πράξη")
    memories = [remember(world.tenant_a, world.qor_a, world.alice, text) for text in texts]
    bob = remember(world.tenant_a, world.qor_a, world.bob, "주간회의 of Bob")
    schema.to([("memory_app", "0009_memory_search_normalised")])
    # As the version before stored them: the text as written, unless it held Chinese or Greek.
    Memory.objects.exclude(content__contains="寿").exclude(content__contains="λ").update(search_text=None)
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("UPDATE memory_app_memory_fts SET content = (SELECT content FROM memory_app_memory m"
                           " WHERE m.id = memory_app_memory_fts.rowid) WHERE content NOT LIKE %s AND content NOT LIKE %s",
                           ["%寿%", "%λογοσ%"])
    assert search(world, "회의") == []
    migration = importlib.import_module("memory_app.migrations.0010_memory_search_accents_korean")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    schema.latest()
    assert search(world, "cafe") == search(world, "café") == [memories[0]]
    assert search(world, "회의") == [memories[1]]
    assert search(world, "κόσμε") == search(world, "κοσμε") == [memories[2]]
    assert search(world, "tea") == [memories[3]]
    assert search(world, "寿司") == [memories[4]]
    assert search(world, "λογος") == [memories[5]]
    assert search(world, "회의", user=world.bob) == [bob]
    assert Memory.objects.get(pk=memories[3].pk).search_text is None
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
    schema.to([("memory_app", "0009_memory_search_normalised")])  # and back: as before
    assert Memory.objects.get(pk=memories[0].pk).search_text is None
    assert search(world, "회의") == []
    assert search(world, "寿司") == [memories[4]]
