"""The chat page's history search endpoint: the signed-in member's own history with that
Qor, with where each hit is and a snippet; nobody else's."""
from __future__ import annotations

from sessions_app.services.append import message_append
from sessions_app.services.lifecycle import session_rotate
from sessions_app.services.resolve import session_resolve

SEARCH = "/chat/api/acme/aria/search"


def say(session, content, role="user"):
    message_append(session=session, role=role, content=content, channel="web", notify=False)


def test_search_answers_hits_with_their_conversation_and_a_snippet(client, world):
    old = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    say(old, "Filler words " * 30 + "the dentist appointment is on Friday at nine, bring the forms " + "x " * 200)
    session_rotate(session=old)
    now = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    say(now, "Your dentist is on Friday.", role="assistant")
    client.force_login(world.alice)

    body = client.get(SEARCH, {"q": "dentist friday"}).json()
    assert body["terms"] == ["dentist", "friday"]
    first, second = body["results"]
    assert (first["session_id"], first["seq"], first["archived"], first["role"]) == (now.pk, 1, False, "assistant")
    assert first["snippet"] == "Your dentist is on Friday."
    assert (second["session_id"], second["archived"]) == (old.pk, True)
    assert second["snippet"].startswith("…") and second["snippet"].endswith("…")
    assert "dentist appointment is on Friday" in second["snippet"] and len(second["snippet"]) <= 182


def test_search_refuses_empty_or_long_queries_and_other_peoples_chats(client, world):
    say(session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice), "secret plans")
    assert client.get(SEARCH, {"q": "plans"}).status_code == 401
    client.force_login(world.alice)
    assert client.get(SEARCH).status_code == 400
    assert client.get(SEARCH, {"q": "x" * 201}).status_code == 400
    assert client.post(SEARCH).status_code == 405
    client.force_login(world.bob)
    assert client.get(SEARCH, {"q": "plans"}).json()["results"] == []
    client.force_login(world.charlie)
    assert client.get(SEARCH, {"q": "plans"}).status_code == 404


def test_a_chinese_word_inside_a_long_message_is_found_and_shown_in_its_snippet(client, world):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    say(session, "今天天气很好。" * 30 + "我昨天在银座吃了寿司，我的猫在家睡觉。" + "明天见。" * 60)
    client.force_login(world.alice)

    body = client.get(SEARCH, {"q": "寿司"}).json()
    assert body["terms"] == ["寿司"]
    (hit,) = body["results"]
    assert hit["snippet"].startswith("…") and "吃了寿司" in hit["snippet"] and len(hit["snippet"]) <= 182
    body = client.get(SEARCH, {"q": "猫 寿司"}).json()  # a word of one letter is a word
    assert body["terms"] == ["猫", "寿司"] and len(body["results"]) == 1


def test_a_message_carried_into_a_fresh_conversation_is_found_once_where_it_was_answered(client, world):
    """A compaction carries the question still waiting for its answer into the fresh
    conversation; the archived original is not found beside its copy."""
    old = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    say(old, "I booked the dentist")
    message_append(session=old, role="user", content="is the dentist on Friday?", channel="web", notify=False,
                   awaits_answer=True)
    now = session_rotate(session=old, seed_summary="Alice booked the dentist.", carry_unanswered=True).session
    say(now, "Yes, the dentist is on Friday.", role="assistant")
    client.force_login(world.alice)

    results = client.get(SEARCH, {"q": "dentist"}).json()["results"]
    assert [(r["session_id"], r["seq"], r["archived"], r["snippet"]) for r in results] == [
        (now.pk, 2, False, "Yes, the dentist is on Friday."),
        (now.pk, 1, False, "is the dentist on Friday?"),
        (old.pk, 1, True, "I booked the dentist"),
    ]


def _marked(snippet: str, marks: list) -> list[str]:
    """What `marks` (UTF-16 offsets, as the page's JavaScript slices strings) cover."""
    units = snippet.encode("utf-16-le")
    return [units[2 * start:2 * end].decode("utf-16-le") for start, end in marks]


def test_the_words_found_are_marked_exactly_where_their_lower_case_is_longer(client, world):
    """The page marked the words by matching the typed words' folded start in the snippet:
    "strasse" never matched "Straße", nor "i̇stanbul" "İstanbul", and the snippet itself
    began off by a letter for each "ß" or "İ" before the word."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    say(session, "Grüße " * 40 + "vom Treffpunkt an der Straße in İstanbul 🙂, bis bald! Straßen sind lang. " + "x " * 100)
    client.force_login(world.alice)

    (hit,) = client.get(SEARCH, {"q": "Straße İstanbul"}).json()["results"]
    assert hit["snippet"].startswith("…Grüße Grüße") and "Treffpunkt an der Straße in İstanbul" in hit["snippet"]
    assert _marked(hit["snippet"], hit["marks"]) == ["Straße", "İstanbul", "Straßen"]
