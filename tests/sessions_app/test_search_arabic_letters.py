"""History and memory search take the spellings of an Arabic letter a reader takes for one
letter as one, as Arabic search engines do (Lucene's Arabic and Persian normalizers): alef
with or without its hamza or madda, and alef wasla, as bare alef ("ايمان" finds "إيمان");
teh marbuta as heh ("مدرسه" finds "مدرسة"); alef maksura as yeh ("الى" finds "إلى"); and
the letters Persian and Urdu keyboards type for the Arabic ones (Persian "کتاب" finds
Arabic "كتاب"). On both databases alike, in what is indexed and what is typed; the word
found is marked whole. Urdu's yeh barree (ے) is a letter of its own, and stays one."""
from __future__ import annotations

import pytest

from memory_app.selectors import memory_search
from qorven.agent.retrieval import memories_for
from sessions_app.fulltext import fold, message_terms, search_terms
from sessions_app.search import hit_spans

from ..factories.memory_app import remember
from .test_search import chat, found, say

pytestmark = pytest.mark.django_db

SCHOOL = "ذهبت إلى مدرسة جديدة مع أحمد"  # "I went to a new school with Ahmad"
FAITH = "إيمان وأمل"  # "faith and hope"
BOOK = "قرأت كتاب القرآن"  # "I read the book of the Quran", in Arabic letters
PERSIAN_BOOK = "این کتاب را خواندم"  # "I read this book", as a Persian keyboard types it
QURAN = "بِسْمِ ٱللَّهِ ٱلرَّحْمَٰنِ ٱلرَّحِيمِ"  # the basmala, with alef wasla
# An alef and a hamza typed after it: composed (NFC), it is "أ", and it is found as "ا".
TYPED_HAMZA = "ا\u0654حمد صديقي"


def test_the_spellings_of_a_letter_are_one_search_term():
    assert fold("إلى") == fold("الى") == fold("ألى") == "الي"
    assert fold("مدرسة") == fold("مدرسه") == "مدرسه"
    assert fold("آمن") == fold("أمن") == fold("امن") == fold("ا\u0653من") == "امن"
    assert fold("ٱلله") == fold("الله") == "الله"
    assert fold("کتاب") == fold("كتاب") == "كتاب"
    assert fold("ایران") == fold("ايران") == "ايران"
    assert search_terms("إيمان") == search_terms("ايمان") == ["ايمان"]
    assert message_terms(TYPED_HAMZA) == message_terms("أحمد صديقي") == ["احمد", "صديقي"]
    # One letter for one, so a place in the folded text is a place in the text (hit_spans).
    for letter in "آأإٱةىیکۀہۂ":
        assert len(fold(letter)) == 1, letter


def test_urdu_yeh_barree_and_the_hamza_seats_of_waw_and_yeh_stay_letters_of_their_own():
    # Urdu's "کے" and "کی" are two words (of, masculine and feminine).
    assert fold("کے") != fold("کی")
    assert fold("ے") == "ے"
    assert fold("سؤال") != fold("سوال") and fold("مسائل") != fold("مسايل")


def test_a_word_is_found_in_any_of_its_spellings(world):
    session = chat(world)
    say(session, SCHOOL)
    say(session, FAITH, role="assistant")
    say(session, BOOK)
    say(session, PERSIAN_BOOK)
    say(session, QURAN)
    say(session, TYPED_HAMZA)
    say(session, "Alice likes tea")
    for query in ["مدرسه", "مدرسة"]:
        assert found(world, query) == [(1, SCHOOL)], query
    for query in ["الى", "إلى", "ألى"]:
        assert found(world, query) == [(1, SCHOOL)], query
    for query in ["ايمان", "إيمان", "أيمان"]:
        assert found(world, query) == [(2, FAITH)], query
    for query in ["كتاب", "کتاب"]:
        assert found(world, query) == [(4, PERSIAN_BOOK), (3, BOOK)], query
    assert found(world, "القران") == found(world, "القرآن") == [(3, BOOK)]
    assert found(world, "الله") == found(world, "ٱللَّه") == [(5, QURAN)]
    assert found(world, "الرحمن") == [(5, QURAN)]
    assert found(world, "احمد") == found(world, "أحمد") == [(6, TYPED_HAMZA), (1, SCHOOL)]
    assert found(world, "این") == found(world, "اين") == [(4, PERSIAN_BOOK)]
    assert found(world, "مدرسه tea") == []
    assert found(world, "مدرسه", user=world.bob) == []  # nobody else's


def test_the_word_found_is_marked_whole_in_its_spelling():
    def marked(text, query):
        return [text[a:b] for a, b in hit_spans(text, message_terms(query))]

    assert marked(SCHOOL, "الى") == ["إلى"]
    assert marked(SCHOOL, "مدرسه") == ["مدرسة"]
    assert marked(SCHOOL, "الى احمد") == ["إلى", "أحمد"]
    assert marked(FAITH, "ايمان") == ["إيمان"]
    assert marked("القرآن", "القران") == ["القرآن"]
    assert marked(BOOK, "کتاب") == ["كتاب"]
    assert marked(PERSIAN_BOOK, "كتاب") == ["کتاب"]
    assert marked(QURAN, "الله") == ["ٱللَّهِ"]
    assert marked(TYPED_HAMZA, "احمد") == ["ا\u0654حمد"]


def test_the_chat_pages_search_marks_the_word_in_its_spelling(client, world):
    from tests.channels_app.test_history_search import SEARCH, _marked

    say(chat(world), SCHOOL)
    client.force_login(world.alice)
    body = client.get(SEARCH, {"q": "الى"}).json()
    (hit,) = body["results"]
    assert _marked(hit["snippet"], hit["marks"]) == ["إلى"]
    say(chat(world), BOOK)
    (hit,) = client.get(SEARCH, {"q": "کتاب"}).json()["results"]
    assert _marked(hit["snippet"], hit["marks"]) == ["كتاب"]


def test_the_search_command_finds_a_word_in_another_spelling(world):
    from sessions_app.search_lines import search_answer

    session = chat(world)
    say(session, SCHOOL)
    say(session, "Alice likes tea")
    answer = search_answer(session=session, args="مدرسه", trust="paired")
    assert "مدرسة" in answer and "tea" not in answer
    assert "كتاب" not in search_answer(session=session, args="کتاب", trust="paired")
    say(session, BOOK)
    assert "كتاب" in search_answer(session=session, args="کتاب", trust="paired")


def test_memories_are_found_in_any_spelling_of_their_words(world):
    school = remember(world.tenant_a, world.qor_a, world.alice, "Alice: " + SCHOOL)
    faith = remember(world.tenant_a, world.qor_a, world.alice, FAITH)
    book = remember(world.tenant_a, world.qor_a, world.alice, PERSIAN_BOOK)
    remember(world.tenant_a, world.qor_a, world.alice, "Alice likes tea")
    remember(world.tenant_a, world.qor_a, world.bob, SCHOOL)

    def search(query, user=world.alice):
        return memory_search(tenant=world.tenant_a, qor=world.qor_a, user=user, query=query, limit=5)

    assert search("مدرسه") == search("مدرسة") == [school]
    assert search("الى") == [school]
    assert search("ايمان") == search("أيمان") == [faith]
    assert search("كتاب") == search("کتاب") == [book]
    assert [m.content for m in search("مدرسه", user=world.bob)] == [SCHOOL]
    # A turn's retrieval reads the person's message the same way.
    lines = memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="كتاب؟")
    assert [line.split(" — ", 1)[1] for line in lines] == [PERSIAN_BOOK]
