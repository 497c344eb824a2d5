"""Facts change: `remember` shows the model the person's memories that look related to the
new note, and stores a correction in place of the memories it `replaces`, the person's
own only, all or nothing."""
from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from memory_app.models import Memory
from memory_app.selectors import memory_search
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve
from tenancy.models import Membership

from ..factories.memory_app import remember
from ..factories.tenancy import QorFactory
from ..fakes.model_server import reply, tool_call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def moved(world):
    """Alice told aria in March that she lives in Paris; others' notes about Paris that
    she must never see or touch: bob's (same Qor), her own with another Qor, charlie's."""
    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).update(timezone="Asia/Tokyo")
    world.paris = remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Paris, near the Louvre")
    Memory.objects.filter(pk=world.paris.pk).update(created_at=datetime(2026, 3, 14, 23, 30, tzinfo=UTC))
    world.figs = remember(world.tenant_a, world.qor_a, world.alice, "Alice likes figs")
    world.bobs = remember(world.tenant_a, world.qor_a, world.bob, "Bob lives in Paris too")
    world.other_qor = QorFactory(tenant=world.tenant_a, slug="other", is_default=False)
    world.other = remember(world.tenant_a, world.other_qor, world.alice, "Alice lives in Paris, says the other Qor")
    world.charlies = remember(world.tenant_b, world.qor_b, world.charlie, "Charlie lives in Paris")
    return world


def say(world, text):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    inbound_accept(session=session, content=text, channel="telegram", sender_name="Alice", trust="paired",
                   user=world.alice)
    return session


def tool_results(model_server):
    last = model_server.requests[-1]["messages"]
    return [json.loads(m["content"]) for m in last if m["role"] == "tool"]


def alices(world):
    return set(Memory.objects.filter(tenant=world.tenant_a, qor=world.qor_a, user=world.alice)
               .values_list("content", flat=True))


def test_remember_shows_the_persons_related_memories_with_their_number_and_date(moved, model_server, drain):
    model_server.add(tool_call("remember", {"content": "Alice lives in Lyon now", "type": "fact"}), reply("Noted."))
    say(moved, "I moved to Lyon")
    drain()
    (result,) = tool_results(model_server)
    assert result["saved"] is True
    assert result["related"] == [{"id": moved.paris.pk, "type": "fact", "date": "2026-03-15",
                                  "content": "Alice lives in Paris, near the Louvre"}]
    assert "replaces" in result["hint"]


def test_related_memories_are_few_and_never_the_new_one(moved, model_server, drain):
    for n in range(5):
        remember(moved.tenant_a, moved.qor_a, moved.alice, f"Alice lived in Lyon in {2000 + n}")
    model_server.add(tool_call("remember", {"content": "Alice lives in Lyon", "type": "fact"}), reply("Noted."))
    say(moved, "I live in Lyon")
    drain()
    (result,) = tool_results(model_server)
    assert len(result["related"]) == 3
    assert result["id"] not in {r["id"] for r in result["related"]}


def test_replaces_stores_the_correction_and_deletes_the_old_memory_at_once(moved, model_server, drain):
    model_server.add(
        tool_call("memory_search", {"query": "Paris"}),
        tool_call("remember", {"content": "Alice lives in Lyon now", "type": "fact", "replaces": [moved.paris.pk]}),
        reply("Updated: Lyon."),
    )
    listing = say(moved, "/memories")
    drain()
    session = say(moved, "I moved to Lyon")
    drain()
    search, result = tool_results(model_server)
    lyon = Memory.objects.get(user=moved.alice, content="Alice lives in Lyon now")
    assert result["id"] == lyon.pk and result["replaced"] == [moved.paris.pk] and result["related"] == []
    assert alices(moved) == {"Alice lives in Lyon now", "Alice likes figs"}
    assert memory_search(tenant=moved.tenant_a, qor=moved.qor_a, user=moved.alice, query="Louvre") == []
    # The earlier search in the conversation no longer holds the old text for the model to read again.
    stored = Message.objects.get(session=session, role="tool", metadata__tool="memory_search")
    assert "Louvre" not in stored.content
    assert {"id": moved.paris.pk, "replaced_by": lyon.pk} in json.loads(stored.content)["results"]
    # And the /memories list shown before says what became of it.
    shown = Message.objects.get(session=listing, role="assistant", metadata__command="memories").content
    assert f"• #{moved.paris.pk} · replaced by #{lyon.pk}" in shown.splitlines() and "Louvre" not in shown


def test_replaces_refuses_a_memory_that_is_not_the_persons_own_and_stores_nothing(moved, model_server, drain):
    foreign = [moved.bobs.pk, moved.other.pk, moved.charlies.pk, 987654]
    model_server.add(
        *[tool_call("remember", {"content": "Alice lives in Nice", "replaces": [moved.paris.pk, pk]})
          for pk in foreign],
        tool_call("remember", {"content": "Alice lives in Nice", "replaces": str(moved.paris.pk)}),
        tool_call("remember", {"content": "Alice lives in Nice", "replaces": [True]}),
        reply("I could not."),
    )
    say(moved, "I moved to Nice")
    drain()
    results = tool_results(model_server)
    assert [r["error"] for r in results[:4]] == [
        f"this user has no memory {pk}; search with memory_search for its id" for pk in foreign]
    assert all("replaces must be a list of memory ids" in r["error"] for r in results[4:])
    assert alices(moved) == {"Alice lives in Paris, near the Louvre", "Alice likes figs"}
    assert Memory.objects.filter(pk__in=[moved.bobs.pk, moved.other.pk, moved.charlies.pk]).count() == 3


def test_a_note_said_again_in_the_same_words_is_not_deleted_by_replacing_itself(moved, model_server, drain):
    model_server.add(
        tool_call("remember", {"content": "Alice likes  FIGS", "replaces": [moved.figs.pk, moved.paris.pk]}),
        reply("Noted."),
    )
    say(moved, "I like figs, and forget Paris")
    drain()
    (result,) = tool_results(model_server)
    assert (result["id"], result["already_known"], result["replaced"]) == (moved.figs.pk, True, [moved.paris.pk])
    assert alices(moved) == {"Alice likes figs"}


def test_a_conversation_digest_is_not_replaced_by_one_note(moved, model_server, drain):
    digest = remember(moved.tenant_a, moved.qor_a, moved.alice, "Talked about Paris and the museums",
                      type="conversation_digest")
    model_server.add(tool_call("remember", {"content": "Alice lives in Lyon", "replaces": [digest.pk]}),
                     reply("Noted."))
    say(moved, "I moved to Lyon")
    drain()
    (result,) = tool_results(model_server)
    assert "conversation digest" in result["error"]
    assert Memory.objects.filter(pk=digest.pk).exists()
    assert "Alice lives in Lyon" not in alices(moved)


def test_the_remember_tool_says_when_to_give_replaces(moved, model_server, drain):
    model_server.add(reply("Hi."))
    say(moved, "hello")
    drain()
    schema = next(t for t in model_server.requests[0]["tools"] if t["function"]["name"] == "remember")["function"]
    assert "replaces" in schema["description"]
    replaces = schema["parameters"]["properties"]["replaces"]
    assert replaces["type"] == "array" and replaces["items"] == {"type": "integer"}


def test_a_forgotten_memory_leaves_the_related_lists_that_showed_it(moved, model_server, drain):
    from memory_app.person_memories import memory_forget

    model_server.add(tool_call("remember", {"content": "Alice lives in Lyon now"}), reply("Noted."))
    session = say(moved, "I moved to Lyon")
    drain()
    memory_forget(tenant=moved.tenant_a, qor=moved.qor_a, user=moved.alice, memory_id=moved.paris.pk)
    stored = Message.objects.get(session=session, role="tool", metadata__tool="remember")
    assert "Louvre" not in stored.content
    assert json.loads(stored.content)["related"] == [{"id": moved.paris.pk, "forgotten": True}]


def test_memory_search_dates_each_memory_as_the_prompt_does(moved, model_server, drain):
    model_server.add(tool_call("memory_search", {"query": "Louvre"}), reply("Paris."))
    say(moved, "where did I live?")
    drain()
    (result,) = tool_results(model_server)
    assert [(r["id"], r["date"]) for r in result["results"]] == [(moved.paris.pk, "2026-03-15")]
