"""Reading on from a message the history search found: `messages?session=&after_seq=` gives
what came after it (the Qor's answer first), in the conversation going on and in an
archived one, for the conversation's owner only."""
from __future__ import annotations

import pytest

from sessions_app.services.append import message_append
from sessions_app.services.lifecycle import session_rotate
from sessions_app.services.resolve import session_resolve

API = "/chat/api/acme/aria/messages"


def talk(session, *turns):
    for n, content in enumerate(turns):
        message_append(session=session, role="user" if n % 2 == 0 else "assistant", content=content, channel="web",
                       notify=False)


def chat(world, user):
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=user)


def test_after_seq_reads_the_answer_to_a_found_question_in_an_archived_and_the_current_conversation(client, world):
    old = chat(world, world.alice)
    talk(old, "where is the spare key?", "Under the blue pot.", "thanks", "Any time.")
    session_rotate(session=old)
    now = chat(world, world.alice)
    talk(now, "what is the wifi password?", "It is on the router: hunter2.")
    client.force_login(world.alice)

    earlier = client.get(API, {"session": old.pk, "after_seq": 1}).json()
    assert earlier["archived"] is True and earlier["more"] is False
    assert [(m["seq"], m["content"]) for m in earlier["messages"]] == [
        (2, "Under the blue pot."), (3, "thanks"), (4, "Any time.")]
    current = client.get(API, {"session": now.pk, "after_seq": 1}).json()
    assert current["session_id"] == now.pk
    assert [m["content"] for m in current["messages"]] == ["It is on the router: hunter2."]
    assert client.get(API, {"session": now.pk, "after_seq": 2}).json()["messages"] == []


def test_after_seq_pages_forward_and_says_when_the_page_was_full(client, world):
    session = chat(world, world.alice)
    talk(session, *[f"m{n}" for n in range(1, 61)])
    client.force_login(world.alice)

    first = client.get(API, {"session": session.pk, "after_seq": 3}).json()
    assert [m["seq"] for m in first["messages"]] == list(range(4, 54)) and first["more"] is True
    rest = client.get(API, {"session": session.pk, "after_seq": 53}).json()
    assert [m["seq"] for m in rest["messages"]] == list(range(54, 61)) and rest["more"] is False


def test_after_seq_never_reads_another_persons_or_another_tenants_conversation(client, world):
    bobs = chat(world, world.bob)
    talk(bobs, "bob's secret question", "bob's secret answer")
    session_rotate(session=bobs)
    bobs_now = chat(world, world.bob)
    talk(bobs_now, "bob again", "bob's current answer")
    charlies = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie)
    talk(charlies, "charlie's question", "charlie's answer")
    client.force_login(world.alice)

    for session in (bobs, bobs_now, charlies):
        response = client.get(API, {"session": session.pk, "after_seq": 1})
        assert response.status_code == 404 and "answer" not in response.content.decode()
    client.force_login(world.charlie)  # a member of globex only: acme's chat is not found
    assert client.get(API, {"session": bobs.pk, "after_seq": 1}).status_code == 404
    client.logout()
    assert client.get(API, {"session": bobs.pk, "after_seq": 1}).status_code == 401


@pytest.mark.parametrize("query, error", [
    ("after_seq=x", "after_seq must be an integer"),
    ("after_seq=-1", "after_seq must be between 0 and"),
    ("after_seq=1_000", "after_seq must be an integer"),
    ("after_seq=%201", "after_seq must be an integer"),
    ("after_seq=99999999999999999999999", "after_seq must be between 0 and"),
    ("before_seq=%D9%A3", "before_seq must be an integer"),  # an Arabic-Indic three
    ("after_seq=1&before_seq=5", "give after_seq or before_seq, not both"),
])
def test_a_bad_after_seq_is_a_400_saying_why(client, world, query, error):
    talk(chat(world, world.alice), "hello")
    client.force_login(world.alice)
    response = client.get(f"{API}?{query}")
    assert response.status_code == 400 and response.json()["error"].startswith(error)
