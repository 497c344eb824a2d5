"""A person sees what their Qor remembers about them and has it forget: `/memories` and
`/forget` on a chat surface, the `forget_memory` tool, the JSON API and the chat page."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from memory_app.models import Memory
from memory_app.selectors import memory_search
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve
from tenancy.services import api_token_create

from ..factories.memory_app import remember
from ..factories.tenancy import QorFactory
from ..fakes.model_server import reply, tool_call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kept(world):
    """Alice's memories with aria, and others' that she must never see or touch: bob's
    (same Qor), her own with another Qor of acme, charlie's (another tenant)."""
    world.other_qor = QorFactory(tenant=world.tenant_a, slug="other", is_default=False)
    world.mine = [remember(world.tenant_a, world.qor_a, world.alice, f"alice note {i}: likes sushi number {i}")
                  for i in range(25)]
    world.bobs = remember(world.tenant_a, world.qor_a, world.bob, "bob keeps his spare key under the mat")
    world.other = remember(world.tenant_a, world.other_qor, world.alice, "alice told the other Qor a secret")
    world.charlies = remember(world.tenant_b, world.qor_b, world.charlie, "charlie's pin is 4321")
    return world


def say(world, user, text, *, channel="telegram", trust="paired", group=False):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=None if group else user,
                              thread_id="-100777" if group else "", group=group)
    inbound_accept(session=session, content=text, channel=channel, sender_name=user.first_name, trust=trust,
                   user=user)
    return session


def last_answer(session):
    return Message.objects.filter(session=session, role="assistant").order_by("-seq").first()


def test_memories_lists_the_persons_own_newest_first_in_pages_without_a_model_call(kept, model_server, drain):
    session = say(kept, kept.alice, "/memories")
    drain()
    answer = last_answer(session)
    assert answer.metadata["command"] == "memories"
    lines = answer.content.splitlines()
    assert lines[0] == "What I remember about you (25):"
    listed = [line for line in lines if line.startswith("• ")]
    assert len(listed) == 20
    assert listed[0].startswith(f"• #{kept.mine[24].pk} · fact · ") and "alice note 24" in listed[0]
    assert "alice note 5:" in listed[-1]
    for foreign in ("spare key", "secret", "4321"):
        assert foreign not in answer.content
    assert f"`/memories #{kept.mine[5].pk}`" in answer.content
    assert model_server.requests == []

    say(kept, kept.alice, f"/memories #{kept.mine[5].pk}")
    drain()
    older = last_answer(session).content
    assert older.splitlines()[0] == "Older memories (of 25):"
    assert [n for n in range(25) if f"alice note {n}:" in older] == [0, 1, 2, 3, 4]
    assert "Older ones" not in older

    say(kept, kept.alice, "/memories soon")
    drain()
    assert last_answer(session).content.startswith("Use `/memories`")


def test_forget_deletes_one_of_the_persons_memories_and_never_anyone_elses(kept, model_server, drain):
    target = kept.mine[3]
    session = say(kept, kept.alice, f"/forget #{target.pk}")
    drain()
    answer = last_answer(session).content
    assert answer.startswith(f"Forgotten: #{target.pk}, a fact from ")
    assert "sushi" not in answer  # what is forgotten is not copied into the conversation
    assert not Memory.objects.filter(pk=target.pk).exists()
    found = memory_search(tenant=kept.tenant_a, qor=kept.qor_a, user=kept.alice, query="number 3", limit=20)
    assert target.pk not in {m.pk for m in found} and len(found) == 20  # others still found

    for foreign in (kept.bobs, kept.other, kept.charlies):
        say(kept, kept.alice, f"/forget {foreign.pk}")
        drain()
        assert last_answer(session).content == f"You have no memory #{foreign.pk}; `/memories` lists yours."
        assert Memory.objects.filter(pk=foreign.pk).exists()
    say(kept, kept.alice, "/forget everything")
    drain()
    assert last_answer(session).content.startswith("Say which memory")
    assert Memory.objects.count() == 24 + 3
    assert model_server.requests == []


def test_a_group_chat_or_an_unpaired_surface_neither_shows_nor_forgets_memories(kept, drain):
    group = say(kept, kept.alice, "/memories", group=True)
    drain()
    answer = last_answer(group).content
    assert answer == "Your memories are shown and forgotten only in a direct chat with me."
    say(kept, kept.alice, f"/forget {kept.mine[0].pk}", group=True)
    drain()
    assert Memory.objects.filter(pk=kept.mine[0].pk).exists()

    direct = say(kept, kept.alice, "/memories", channel="webchat", trust="public")
    drain()
    assert last_answer(direct).content == "Your memories are shown and forgotten only once you are paired with me."


def test_the_model_forgets_what_the_person_asks_it_to_and_only_their_own(kept, model_server, drain):
    target = remember(kept.tenant_a, kept.qor_a, kept.alice, "alice is allergic to peanuts")
    model_server.add(
        tool_call("memory_search", {"query": "peanuts"}),
        tool_call("forget_memory", {"id": target.pk}),
        tool_call("forget_memory", {"id": kept.bobs.pk}),
        tool_call("forget_memory", {"id": "7"}),
        reply("Done, I have forgotten it."),
    )
    session = say(kept, kept.alice, "please forget that I am allergic to peanuts")
    drain()
    assert last_answer(session).content == "Done, I have forgotten it."
    offered = {t["function"]["name"] for t in model_server.requests[0]["tools"]}
    assert "forget_memory" in offered
    results = [json.loads(m["content"]) for m in model_server.requests[4]["messages"] if m["role"] == "tool"]
    assert [r["id"] for r in results[0]["results"]] == [target.pk]
    assert results[1] == {"forgotten": target.pk, "type": "fact"}
    assert f"no memory {kept.bobs.pk}" in results[2]["error"]
    assert "id must be an integer" in results[3]["error"]
    assert not Memory.objects.filter(pk=target.pk).exists()
    assert Memory.objects.filter(pk=kept.bobs.pk).exists()


@pytest.fixture
def tokens(kept):
    return {
        "alice": api_token_create(tenant=kept.tenant_a, user=kept.alice)[1],
        "charlie": api_token_create(tenant=kept.tenant_b, user=kept.charlie)[1],
    }


def api(client, token, method, path, **params):
    call = getattr(client, method)
    return call(f"/v1/qors/{path}", params or None, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_the_api_lists_a_persons_memories_in_pages_and_forgets_one(client, kept, tokens):
    first = api(client, tokens["alice"], "get", "aria/memories", limit="10")
    assert first.status_code == 200
    body = first.json()
    assert (body["total"], body["more"], len(body["memories"])) == (25, True, 10)
    newest = body["memories"][0]
    assert newest["id"] == kept.mine[24].pk and newest["content"] == "alice note 24: likes sushi number 24"
    assert (newest["type"], newest["period_start"]) == ("fact", None)
    rest = api(client, tokens["alice"], "get", "aria/memories", before=str(body["memories"][-1]["id"]),
               limit="100").json()
    assert [m["id"] for m in rest["memories"]] == [m.pk for m in reversed(kept.mine[:15])]
    assert rest["more"] is False
    assert api(client, tokens["alice"], "get", "aria/memories", limit="101").status_code == 400
    assert api(client, tokens["alice"], "get", "aria/memories", before="x").status_code == 400

    gone = api(client, tokens["alice"], "delete", f"aria/memories/{kept.mine[0].pk}")
    assert (gone.status_code, gone.json()) == (200, {"forgotten": kept.mine[0].pk})
    assert api(client, tokens["alice"], "delete", f"aria/memories/{kept.mine[0].pk}").status_code == 404
    for foreign in (kept.bobs, kept.other, kept.charlies):
        assert api(client, tokens["alice"], "delete", f"aria/memories/{foreign.pk}").status_code == 404
    assert api(client, tokens["alice"], "delete", "aria/memories/99999999999999999999999").status_code == 404
    assert api(client, tokens["alice"], "post", "aria/memories").status_code == 405
    assert Memory.objects.count() == 24 + 3


def test_the_api_never_shows_another_tenants_or_qors_memories(client, kept, tokens):
    other = api(client, tokens["alice"], "get", "other/memories").json()
    assert [m["content"] for m in other["memories"]] == ["alice told the other Qor a secret"]
    charlie = api(client, tokens["charlie"], "get", "aria/memories").json()  # globex's aria
    assert [m["content"] for m in charlie["memories"]] == ["charlie's pin is 4321"]
    assert api(client, tokens["charlie"], "delete", f"aria/memories/{kept.mine[1].pk}").status_code == 404
    assert client.get("/v1/qors/aria/memories").status_code == 401
    assert Memory.objects.filter(pk=kept.mine[1].pk).exists()


def test_the_chat_page_lists_and_forgets_with_its_session_and_csrf_token(kept):
    base = "/chat/api/acme/aria/memories"
    browser = Client(enforce_csrf_checks=True)
    assert browser.get(base).status_code == 401
    browser.force_login(kept.alice)
    page = browser.get("/chat/aria/?tenant=acme")
    assert page.status_code == 200 and base.encode() in page.content
    body = browser.get(base).json()
    assert (body["total"], len(body["memories"]), body["more"]) == (25, 20, True)
    older = browser.get(base, {"before": body["memories"][-1]["id"]}).json()
    assert len(older["memories"]) == 5
    assert browser.get(base, {"before": "-1"}).status_code == 400

    target = f"{base}/{kept.mine[2].pk}"
    refused = browser.delete(target)
    assert refused.status_code == 403 and "security token" in refused.json()["error"]
    assert Memory.objects.filter(pk=kept.mine[2].pk).exists()
    token = browser.cookies["csrftoken"].value
    assert browser.delete(target, HTTP_X_CSRFTOKEN=token).json() == {"forgotten": kept.mine[2].pk}
    assert not Memory.objects.filter(pk=kept.mine[2].pk).exists()
    assert browser.delete(f"{base}/{kept.bobs.pk}", HTTP_X_CSRFTOKEN=token).status_code == 404
    assert browser.post(base, HTTP_X_CSRFTOKEN=token).status_code == 405

    browser.force_login(kept.charlie)
    assert browser.get(base).status_code == 404  # acme's chat is not charlie's
    assert browser.delete(f"{base}/{kept.mine[3].pk}", HTTP_X_CSRFTOKEN=token).status_code in (403, 404)
    assert Memory.objects.filter(pk=kept.mine[3].pk).exists()


def test_a_forgotten_memory_leaves_the_lists_that_showed_it_and_only_its_own_line(kept, drain):
    target, kept_one = kept.mine[24], kept.mine[23]
    session = say(kept, kept.alice, "/memories")
    drain()
    listing = last_answer(session)
    assert "alice note 24:" in listing.content
    bobs_session = say(kept, kept.bob, "/memories")
    drain()
    bobs_listing = last_answer(bobs_session).content

    say(kept, kept.alice, f"/forget #{target.pk}")
    drain()
    listing.refresh_from_db()
    assert "alice note 24" not in listing.content  # on the chat page, in /history, in an export
    assert f"• #{target.pk} · forgotten" in listing.content.splitlines()
    assert "alice note 23: likes sushi number 23" in listing.content and kept_one.pk != target.pk
    assert last_answer(bobs_session).content == bobs_listing


def test_a_forgotten_memory_is_not_read_again_from_an_earlier_search_in_the_conversation(kept, model_server, drain):
    target = remember(kept.tenant_a, kept.qor_a, kept.alice, "alice is allergic to peanuts")
    model_server.add(tool_call("memory_search", {"query": "peanuts"}), reply("Noted."))
    session = say(kept, kept.alice, "what am I allergic to?")
    drain()
    say(kept, kept.alice, f"/forget #{target.pk}")
    drain()
    model_server.add(reply("I don't know."))
    say(kept, kept.alice, "so, what am I allergic to?")
    drain()
    sent = model_server.requests[-1]["messages"]
    assert not any("allergic to peanuts" in json.dumps(m) for m in sent)  # the search's query stays
    results = [json.loads(m["content"]) for m in sent if m["role"] == "tool"]
    assert results == [{"results": [{"id": target.pk, "forgotten": True}]}]
    assert last_answer(session).content == "I don't know."


def test_forget_says_the_date_memories_shows(kept, drain):
    """A note the memory flush drew from a conversation in March and stored in June reads
    "14 Mar" in /memories (when it was said); /forget said "from" the day it was stored."""
    from datetime import UTC, datetime

    flushed = remember(kept.tenant_a, kept.qor_a, kept.alice, "alice moved her piano to the attic",
                       period_start=datetime(2026, 3, 14, 9, 0, tzinfo=UTC),
                       period_end=datetime(2026, 3, 14, 10, 0, tzinfo=UTC))
    Memory.objects.filter(pk=flushed.pk).update(created_at=datetime(2026, 6, 2, 12, 0, tzinfo=UTC))
    session = say(kept, kept.alice, "/memories")
    drain()
    assert f"• #{flushed.pk} · fact · 14 Mar 2026 — alice moved her piano to the attic" in last_answer(
        session).content.splitlines()
    say(kept, kept.alice, f"/forget #{flushed.pk}")
    drain()
    assert last_answer(session).content == f"Forgotten: #{flushed.pk}, a fact from 14 Mar 2026."
