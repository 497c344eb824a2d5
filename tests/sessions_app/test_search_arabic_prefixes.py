"""History and memory search find an Arabic word with the article or a one-letter
conjunction or preposition written onto it, as Arabic search engines do (Lucene's
ArabicStemmer.stemPrefix: ال, وال, بال, كال, فال, لل, and و when three letters are left):
"مدرسة" (school) finds "المدرسة" (the school), "والمدرسة", "بالمدرسة" and "للمدرسة", and
"المدرسة" typed finds "مدرسة". A short word keeps its letters ("ولد", boy; "لله"), and no
suffix is taken off. On both databases alike; the word found is marked whole, its prefix
with it."""
from __future__ import annotations

import random

import pytest
from django.db import connection

from memory_app.selectors import memory_search
from qorven.agent.retrieval import memories_for
from sessions_app.fulltext import arabic_forms, arabic_stem, message_terms, search_terms, search_text
from sessions_app.search import hit_spans

from ..factories.memory_app import remember
from .test_search import chat, found, say

pytestmark = pytest.mark.django_db

BARE = "هذه مدرسة جديدة"  # "this is a new school"
THE = "ذهبت إلى المدرسة صباحا"  # "I went to the school in the morning"
AND_THE = "والمدرسة قريبة"  # "and the school is near"
AT_THE = "كنت بالمدرسة أمس"  # "I was at the school yesterday"
FOR_THE = "هدية للمدرسة"  # "a gift for the school"
SCHOOLS = [BARE, THE, AND_THE, AT_THE, FOR_THE]
BOY = "رأيت ولد صغير"  # "I saw a little boy": و is a letter of "ولد", not "and"
MINISTER = "قابلت الوزير"  # "I met the minister": وزير starts as "and" does


def test_a_prefix_is_read_off_an_arabic_word_as_lucene_reads_it():
    assert arabic_stem("المدرسه") == arabic_stem("والمدرسه") == arabic_stem("بالمدرسه") == "مدرسه"
    assert arabic_stem("كالمدرسه") == arabic_stem("فالمدرسه") == arabic_stem("للمدرسه") == "مدرسه"
    assert arabic_stem("وكتاب") == "كتاب"
    assert arabic_stem("اليوم") == "يوم" and arabic_stem("الام") == "ام"  # two letters are enough after ال
    # Too short: و needs three letters after it, the others two.
    for word in ["ولد", "لله", "الي", "وال", "بال", "بالي", "مدرسه", "كتاب", "ال", "و"]:
        assert arabic_stem(word) == word, word
    assert arabic_stem("والد") == "الد"  # Lucene's one prefix, the first that fits
    assert arabic_stem("والمدرسه") != "درسه" and arabic_stem("وللبيت") == "للبيت"  # one prefix only
    # Terms stay whole; the query also asks for the word without its prefix.
    assert search_terms("المدرسة") == ["المدرسه"]
    assert arabic_forms("المدرسه") == ["المدرسه", "مدرسه"]
    assert arabic_forms("مدرسه") == ["مدرسه"] and arabic_forms("ولد") == ["ولد"]
    assert arabic_forms("lesson") == ["lesson"] and arabic_forms("المدرسه2") == ["المدرسه2"]


def test_the_index_also_reads_each_prefixed_word_without_its_prefix():
    assert search_text(THE) == "ذهبت الي المدرسه صباحا مدرسه"
    assert search_text("ٱلْمَدْرَسَةُ وَالْبَيْتُ") == "المدرسه والبيت مدرسه بيت"
    # Nothing added for a short word, a word without a prefix, or another script.
    assert search_text(BOY) == BOY.replace("رأيت", "رايت")
    assert search_text("لله الحمد") == "لله الحمد حمد"
    assert search_text("مدرسة كبيرة") == "مدرسه كبيره"
    assert search_text("hello world") is None
    assert search_text("Álvaro lleva") == "Alvaro lleva"


def test_a_word_is_found_with_or_without_its_prefix(world):
    session = chat(world)
    for text in SCHOOLS:
        say(session, text)
    say(session, BOY, role="assistant")
    say(session, MINISTER)
    say(session, "Alice likes tea")
    every = [(5, FOR_THE), (4, AT_THE), (3, AND_THE), (2, THE), (1, BARE)]
    for query in ["مدرسة", "مدرسه", "المدرسة", "والمدرسة", "بالمدرسة", "للمدرسة", "ٱلْمَدْرَسَة"]:
        assert found(world, query) == every, query
    assert found(world, "المدرسة صباحا") == [(2, THE)]  # every word still must occur
    assert found(world, "ولد") == [(6, BOY)]  # not "لد"
    assert found(world, "وزير") == found(world, "الوزير") == [(7, MINISTER)]
    assert found(world, "مدرسة tea") == []
    assert found(world, "مدرسة", user=world.bob) == []  # nobody else's


def test_the_word_found_is_marked_whole_with_its_prefix():
    def marked(text, query):
        return [text[a:b] for a, b in hit_spans(text, message_terms(query))]

    assert marked(THE, "مدرسة") == ["المدرسة"]
    assert marked(AND_THE, "مدرسة") == ["والمدرسة"]
    assert marked(AT_THE, "المدرسة") == ["بالمدرسة"]
    assert marked(FOR_THE, "مدرسة") == ["للمدرسة"]
    assert marked(BARE, "المدرسة") == ["مدرسة"]
    assert marked("إلى ٱلْمَدْرَسَةِ", "مدرسة") == ["ٱلْمَدْرَسَةِ"]
    assert marked(MINISTER, "وزير") == ["الوزير"]
    # A letter before the word that is no prefix: inside a word, not marked, as before.
    assert marked("تمدرسة مدرسة", "مدرسة") == ["مدرسة"]
    assert marked("ومدرسة", "مدرسة") == ["ومدرسة"]
    assert marked("ولد", "لد") == []


def test_the_chat_pages_search_marks_the_word_with_its_prefix(client, world):
    from tests.channels_app.test_history_search import SEARCH, _marked

    say(chat(world), THE)
    client.force_login(world.alice)
    (hit,) = client.get(SEARCH, {"q": "مدرسة"}).json()["results"]
    assert _marked(hit["snippet"], hit["marks"]) == ["المدرسة"]


def test_the_search_command_finds_the_word_with_its_prefix(world):
    from sessions_app.search_lines import search_answer

    session = chat(world)
    say(session, AT_THE)
    say(session, "Alice likes tea")
    answer = search_answer(session=session, args="مدرسة", trust="paired")
    assert "بالمدرسة" in answer and "tea" not in answer


def test_memories_are_found_with_or_without_a_prefix(world):
    the = remember(world.tenant_a, world.qor_a, world.alice, "Alice: " + THE)
    bare = remember(world.tenant_a, world.qor_a, world.alice, BARE)
    boy = remember(world.tenant_a, world.qor_a, world.alice, BOY)
    remember(world.tenant_a, world.qor_a, world.alice, "Alice likes tea")
    remember(world.tenant_a, world.qor_a, world.bob, THE)

    def search(query, user=world.alice):
        return memory_search(tenant=world.tenant_a, qor=world.qor_a, user=user, query=query, limit=5)

    for query in ["مدرسة", "المدرسة", "للمدرسة"]:
        assert set(search(query)) == {the, bare}, query
    assert search("ولد") == [boy]
    assert [m.content for m in search("مدرسة", user=world.bob)] == [THE]
    # A turn's retrieval reads the person's message the same way.
    lines = memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="أين المدرسة؟")
    assert sorted(line.split(" — ", 1)[1] for line in lines) == sorted([the.content, bare.content])


def _indexed(text: str) -> str:
    indexed = search_text(text)
    return text if indexed is None else indexed


def _generated(count: int) -> list[str]:
    """Texts of Arabic words, prefixed or not, of every length from one letter, with points,
    tatweel, other scripts and punctuation between them."""
    rng = random.Random(7)
    letters = "ابتثجحخدذرسشصضطظعغفقكلمنهويءآأإؤئةىٱکیپچگ"
    prefixes = ["", "", "ال", "وال", "بال", "كال", "فال", "لل", "و", "ب", "ف", "ك", "ل"]
    glue = [" ", " ", "، ", "\u064e", "\u0640", "\u0301", "1", "x", "-", " 寿 ", " 회의록 "]
    texts = []
    for _ in range(count):
        words = [rng.choice(prefixes) + "".join(rng.choice(letters) for _ in range(rng.randint(0, 5)))
                 for _ in range(rng.randint(1, 8))]
        texts.append("".join(word + rng.choice(glue) for word in words))
    return texts


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's function; SQLite's is search_text itself")
def test_postgresql_reads_the_prefixes_off_as_search_text_does():
    examples = [THE, AND_THE, AT_THE, FOR_THE, BARE, BOY, MINISTER, "لله الحمد", "والد ولد وال بال الام",
                "ٱلْمَدْرَسَةُ وَالْبَيْتُ", "주간회의 المدرسة", "المدرسة 주간회의", "x المدرسة2 3والمدرسة"]
    with connection.cursor() as cursor:
        for text in examples + _generated(2000):
            cursor.execute("SELECT message_search_text(%s)", [text])
            assert cursor.fetchone()[0] == _indexed(text), ascii(text)


# Written as many do (heh for teh marbuta, no points): only the prefix changes its search text.
HEH_SCHOOL = "ذهبت الي المدرسه"
HEH_BARE = "مدرسه جديده"


def test_the_migration_reads_the_prefixes_off_as_the_search_text_does_and_rewrites_every_row_it_changes():
    import importlib
    import re

    from sessions_app import fulltext

    migration = importlib.import_module(f"sessions_app.migrations.{MIGRATION[1]}")
    assert migration.ARABIC_PREFIXES == fulltext.ARABIC_PREFIXES
    assert migration.ARABIC_WORD_LETTER == fulltext.ARABIC_WORD_LETTER
    changed = re.compile(migration.CHANGED)
    texts = [THE, AND_THE, AT_THE, FOR_THE, BARE, BOY, MINISTER, HEH_SCHOOL, HEH_BARE, "ولد", "لله", "وال"]
    for text in texts + _generated(3000):
        assert migration.search_text(text) == _indexed(text), ascii(text)
        if migration.search_text(text) != migration.search_text_before(text):
            assert changed.search(text), ascii(text)
    assert changed.search(HEH_SCHOOL) and not changed.search(HEH_BARE)


MIGRATION = ("sessions_app", "0020_message_search_arabic_hebrew")
BEFORE = ("sessions_app", "0019_message_search_marks_in_words")
MEMORIES_BEFORE = ("memory_app", "0011_memory_search_marks_in_words")


@pytest.mark.django_db(transaction=True)
def test_a_message_written_before_the_migration_is_found_without_its_prefix_after_it(world, schema):
    from sessions_app.migrations._trigger import SEARCH_TABLE

    schema.to([BEFORE])
    session = chat(world)
    for text in [HEH_SCHOOL, HEH_BARE, "Alice likes tea"]:
        say(session, text)
    if connection.vendor == "sqlite":  # as the version before indexed them: whole words alone
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {SEARCH_TABLE} SET content = (SELECT content FROM sessions_app_message m"
                           f" WHERE m.id = {SEARCH_TABLE}.rowid)")
    assert found(world, "مدرسه") == [(2, HEH_BARE)]
    schema.to([MIGRATION])
    assert found(world, "مدرسه") == found(world, "المدرسة") == [(2, HEH_BARE), (1, HEH_SCHOOL)]
    if connection.vendor == "postgresql":
        from .test_search_vowel_points import _through_the_index

        assert _through_the_index("مدرسه") == 2  # its entry was written again, not only the function
    assert found(world, "tea") == [(3, "Alice likes tea")]
    schema.to([BEFORE])  # and back: as before
    assert found(world, "مدرسه") == [(2, HEH_BARE)]
    assert found(world, "المدرسه") == [(2, HEH_BARE), (1, HEH_SCHOOL)]  # as "المدرسه" or "مدرسه"


@pytest.mark.django_db(transaction=True)
def test_a_memory_stored_before_the_migration_is_found_without_its_prefix_after_it(world, schema):
    from memory_app.models import Memory

    school = remember(world.tenant_a, world.qor_a, world.alice, HEH_SCHOOL)
    bare = remember(world.tenant_a, world.qor_a, world.alice, HEH_BARE)
    schema.to([MEMORIES_BEFORE])
    Memory.objects.filter(pk=school.pk).update(search_text=None)  # as the version before stored it
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("UPDATE memory_app_memory_fts SET content = %s WHERE rowid = %s", [HEH_SCHOOL, school.pk])

    def search(query):
        return memory_search(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query=query, limit=5)

    assert search("مدرسه") == [bare]
    schema.latest()
    assert set(search("مدرسه")) == {school, bare}
    assert Memory.objects.get(pk=school.pk).search_text == HEH_SCHOOL + " مدرسه"
    schema.to([MEMORIES_BEFORE])  # and back: as before
    assert Memory.objects.get(pk=school.pk).search_text is None
    assert search("مدرسه") == [bare]


def test_god_keeps_the_article_of_his_name_and_to_him_finds_neither(world):
    """"الله" (God) is a name whose "ال" belongs to it: read off, it would leave "له" (to
    him), among the commonest Arabic words, and every search for either found the other."""
    assert arabic_stem("الله") == "الله" and arabic_stem("بالله") == "بالله"
    assert arabic_stem("والله") == "الله"  # "and God": the "و" is read off, the name kept
    assert search_text("الحمد لله") == "الحمد لله حمد" and search_text("الله اكبر") is None
    session = chat(world)
    say(session, "الله أكبر")  # "God is greatest"
    say(session, "قلت له شكرا")  # "I said thank you to him"
    say(session, "والله لا أعرف")  # "by God, I do not know"
    assert found(world, "الله") == [(3, "والله لا أعرف"), (1, "الله أكبر")]
    assert found(world, "له") == [(2, "قلت له شكرا")]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT message_search_text(%s)", ["الله بالله والله له"])
            assert cursor.fetchone()[0] == search_text("الله بالله والله له")
