"""memory_search in languages written without spaces (Chinese, Japanese, Thai): a word
inside a sentence is found, on both databases alike, as English words are."""
from __future__ import annotations

import pytest

from memory_app.fulltext import memory_terms
from memory_app.models import Memory
from memory_app.services import memory_delete, memory_update

from ..factories.memory_app import remember
from ..factories.tenancy import QorFactory
from .test_search import indexed_texts, search

pytestmark = pytest.mark.django_db


def test_a_chinese_word_is_found_inside_a_sentence(world):
    sushi = remember(world.tenant_a, world.qor_a, world.alice, "我喜欢寿司")
    cat = remember(world.tenant_a, world.qor_a, world.alice, "我的猫叫小米")
    assert search(world, "寿司") == [sushi]
    assert search(world, "猫") == [cat]  # a word of one letter, asked for alone
    assert search(world, "小米是谁？") == [cat]
    assert search(world, "拉面") == []
    assert search(world, "司我") == []  # letters of the memory, but not next to each other


def test_a_chinese_question_ranks_the_memory_sharing_most_of_it_first(world):
    shop = remember(world.tenant_a, world.qor_a, world.alice, "我最喜欢的寿司店是银座的次郎")
    tasty = remember(world.tenant_a, world.qor_a, world.alice, "寿司很好吃")
    remember(world.tenant_a, world.qor_a, world.alice, "明天要去医院")
    assert search(world, "我最喜欢哪家寿司店？") == [shop, tasty]


def test_japanese_is_found_by_its_words_in_kanji_kana_and_half_width_katakana(world):
    sushi = remember(world.tenant_a, world.qor_a, world.alice, "私は寿司が大好きです")
    tower = remember(world.tenant_a, world.qor_a, world.alice, "先週、東京タワーに行った")
    assert search(world, "寿司") == [sushi]
    assert search(world, "タワー") == [tower]
    assert search(world, "ﾀﾜｰ") == [tower]  # half-width, as some keyboards and old mail write it
    assert search(world, "どんな寿司が好き？") == [sushi]
    assert search(world, "東京") == [tower]


def test_thai_is_found_by_its_words_whatever_their_vowel_and_tone_marks(world):
    sushi = remember(world.tenant_a, world.qor_a, world.alice, "ฉันชอบกินซูชิ")
    cat = remember(world.tenant_a, world.qor_a, world.alice, "แมวของฉันชื่อมิโซะ")
    assert search(world, "ซูชิ") == [sushi]
    assert search(world, "แมว") == [cat]
    assert set(search(world, "ฉัน")) == {sushi, cat}  # "I": in both
    assert search(world, "ทุเรียน") == []


def test_a_memory_mixing_english_and_chinese_is_found_by_either(world):
    mixed = remember(world.tenant_a, world.qor_a, world.alice, "Alice的passport号码是4471")
    english = remember(world.tenant_a, world.qor_a, world.alice, "Alice renewed her passport in March")
    assert search(world, "号码") == [mixed]
    assert search(world, "4471") == [mixed]
    assert set(search(world, "passports")) == {mixed, english}  # stemmed inside Chinese text too
    assert search(world, "passport号码") == [mixed, english]  # both words: it ranks first
    assert search(world, "when did I renew my passport?") == [english, mixed]


def test_a_chinese_memory_of_another_tenant_qor_or_user_never_matches(world):
    words = "备用钥匙在蓝色花盆下面"
    remember(world.tenant_b, world.qor_b, world.charlie, words)
    remember(world.tenant_a, QorFactory(tenant=world.tenant_a, slug="other", is_default=False), world.alice, words)
    remember(world.tenant_a, world.qor_a, world.bob, words)
    remember(world.tenant_a, world.qor_a, None, words)
    assert search(world, "备用钥匙在哪里？") == []
    mine = remember(world.tenant_a, world.qor_a, world.alice, words)
    assert search(world, "备用钥匙在哪里？") == [mine]
    assert search(world, "钥匙", tenant=world.tenant_b) == []


@pytest.mark.parametrize("query", [
    '寿司" OR owner : *', "寿*司", "NEAR(寿 司)", 'content:寿司 AND "', "寿司'; DROP TABLE x; --", "「寿司」",
    "寿" * 5000,
])
def test_chinese_text_is_never_read_as_search_syntax(world, query):
    remember(world.tenant_a, world.qor_a, world.alice, "我喜欢寿司")
    remember(world.tenant_a, world.qor_a, world.bob, "Bob也喜欢寿司")
    found = search(world, query)
    assert all(m.user_id == world.alice.pk for m in found)


def test_edits_and_deletions_of_a_chinese_memory_keep_the_index_in_step(world):
    memory = remember(world.tenant_a, world.qor_a, world.alice, "我喜欢寿司")
    memory_update(memory=memory, content="我喜欢拉面")
    assert search(world, "寿司") == []
    assert search(world, "拉面") == [memory]
    memory_update(memory=memory, content="I like ramen")  # no longer Chinese: nothing is kept twice
    assert Memory.objects.get(pk=memory.pk).search_text is None
    assert search(world, "拉面") == [] and search(world, "ramen") == [memory]
    memory_update(memory=memory, content="我喜欢拉面")
    memory_delete(memories=[memory])
    assert search(world, "拉面") == []
    assert not any("拉" in text for text in indexed_texts())


def test_a_long_message_asks_for_a_bounded_number_of_pairs_with_grammar_last(world):
    terms = memory_terms("昨日、友達と一緒に新しいラーメン屋さんに行きましたが、とても美味しかったです。" * 3)
    assert len(terms) == 16 and "ラ ー" in terms and "で す" not in terms
    # English words and pairs of letters share the bound.
    mixed = memory_terms(" ".join(f"word{i}" for i in range(20)) + " 寿司店的名字是什么")
    assert len(mixed) == 16 and "寿 司" in mixed and "word1" in mixed


SCRIPTS = {
    "chinese": "北京烤鸭配甜面酱",
    "japanese": "ハンバーグとお味噌汁々〆",
    "thai": "กรุงเทพมหานคร๑๒",
    "khmer": "ភ្នំពេញ",
    "myanmar": "မြန်မာစာ",
    "rare ideographs": "𠮷野家の豈",  # extension B, a compatibility ideograph
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_pair_of_neighbouring_letters_finds_its_memory_on_either_database(world, script):
    """Both databases read the same tokens from the search text: each letter, in order."""
    memory = remember(world.tenant_a, world.qor_a, world.alice, SCRIPTS[script])
    remember(world.tenant_a, world.qor_a, world.alice, "an English note")
    pairs = [t for t in memory_terms(SCRIPTS[script]) if " " in t]
    assert pairs
    for pair in pairs:
        first, second = pair.split(" ")
        assert search(world, first + second) == [memory], pair
        if f"{second} {first}" not in pairs:
            assert search(world, second + first) == [], pair  # neighbours, and in this order


@pytest.mark.django_db(transaction=True)
def test_memories_stored_before_the_migration_are_found_after_it(world, schema, monkeypatch):
    import importlib

    from django.core import checks

    memories = [remember(world.tenant_a, world.qor_a, world.alice, text)
                for text in ("我喜欢寿司", "Alice likes tea", "東京タワーに行った", "寿司很好吃", "ฉันชอบกินซูชิ")]
    remember(world.tenant_a, world.qor_a, world.bob, "Bob也喜欢寿司")
    schema.to([("memory_app", "0007_compact_requests")])
    # As it was: each sentence one word to the index, so no word inside it is there.
    texts = indexed_texts()
    assert any("我喜欢寿司" in text for text in texts)
    assert not any("寿 " in text or "'寿'" in text for text in texts)
    migration = importlib.import_module("memory_app.migrations.0008_memory_search_text")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    schema.latest()
    assert search(world, "寿司") == [memories[3], memories[0]]
    assert search(world, "タワー") == [memories[2]]
    assert search(world, "ซูชิ") == [memories[4]]
    assert search(world, "tea") == [memories[1]]
    assert Memory.objects.get(pk=memories[1].pk).search_text is None
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []  # the delete trigger stayed
