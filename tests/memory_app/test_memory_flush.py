"""The memory flush keeps what a conversation said as `remember` would: it is shown the
person's notes that look related, says which of them a new note corrects or already
holds, and dates each note by the message it came from, so a stale note drawn late
never reads as newer than what the person said after it."""
from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from memory_app.compaction import compaction_rotate
from memory_app.models import Memory
from qorven.agent.gateway import inbound_accept
from qorven.agent.retrieval import memories_for
from sessions_app.models import Message, Session
from sessions_app.services.resolve import session_resolve
from tenancy.trust import Trust

from ..factories.memory_app import remember
from ..fakes.model_server import reply, tool_call
from ..fakes.summarizer import FakeModel, kind_of

pytestmark = pytest.mark.django_db(transaction=True)

MARCH = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)
NOV_1 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
NOV_20 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


@pytest.fixture
def fake(model_server):
    model = FakeModel()
    model_server.default = model
    return model


def canonical(world) -> Session:
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)


def talk(world, drain, *said: tuple[str, datetime]) -> Session:
    """Alice says each line at its time (the answer comes a minute later)."""
    session = canonical(world)
    for text, at in said:
        message = inbound_accept(session=session, content=text, channel="web", sender_name="Alice",
                                 trust=Trust.OWNER, user=world.alice).message
        drain()
        Message.objects.filter(session=session, seq=message.seq).update(created_at=at)
        Message.objects.filter(session=session, seq__gt=message.seq).update(created_at=at.replace(minute=1))
    return session


def compact(world, drain) -> None:
    inbound_accept(session=canonical(world), content="/compact", channel="web", sender_name="Alice",
                   trust=Trust.OWNER, user=world.alice)
    drain()


def dated(memory: Memory, at: datetime) -> Memory:
    Memory.objects.filter(pk=memory.pk).update(created_at=at)
    memory.refresh_from_db()
    return memory


def notes(user) -> dict[str, Memory]:
    return {m.content: m for m in Memory.objects.filter(user=user, type__in=["fact", "lesson", "reminder"])}


def flush_request(model_server) -> dict:
    return next(r for r in model_server.requests if kind_of(r) == "flush")


def flush_answer(*facts: object) -> str:
    return json.dumps({"facts": list(facts), "reminders": [], "open_tasks": []})


# --- what is known already ----------------------------------------------------------------


def test_a_fact_said_again_in_other_words_is_the_known_note_said_again_not_a_second_one(
    world, fake, model_server, drain
):
    home = dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice's home is in Paris"), MARCH)
    remember(world.tenant_a, world.qor_a, world.bob, "Bob's home is in Paris")
    remember(world.tenant_b, world.qor_b, world.charlie, "Charlie's home is in Paris")
    talk(world, drain, ("I live in Paris, by the way", NOV_20))
    fake.flush_override = [flush_answer({"text": "Alice lives in Paris", "said": "2026-11-20 09:00",
                                         "known": home.pk})]
    compact(world, drain)

    shown = flush_request(model_server)["messages"][1]["content"]
    assert f"#{home.pk} · fact · 14 Mar 2026 — Alice's home is in Paris" in shown.splitlines()
    assert "Bob" not in shown and "Charlie" not in shown
    assert set(notes(world.alice)) == {"Alice's home is in Paris"}
    home.refresh_from_db()
    assert home.said_at == NOV_20  # said again, in other words


def test_a_flushed_note_replaces_the_persons_notes_it_corrects_and_only_theirs(world, fake, model_server, drain):
    paris = dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Paris"), MARCH)
    bobs = remember(world.tenant_a, world.qor_a, world.bob, "Bob lives in Paris")
    charlies = remember(world.tenant_b, world.qor_b, world.charlie, "Charlie lives in Paris")
    fake.main = [tool_call("memory_search", {"query": "Paris"}), reply("In Paris."), reply("Noted.")]
    session = talk(world, drain, ("where do I live?", NOV_1), ("I moved to Lyon", NOV_20))
    fake.flush_override = [flush_answer({"text": "Alice lives in Lyon", "said": "2026-11-20 09:00",
                                         "replaces": [paris.pk, bobs.pk, charlies.pk, 987654]})]
    compact(world, drain)

    lyon = notes(world.alice)["Alice lives in Lyon"]
    assert set(notes(world.alice)) == {"Alice lives in Lyon"}
    assert lyon.said_at == NOV_20
    assert Memory.objects.filter(pk__in=[bobs.pk, charlies.pk]).count() == 2
    # The search the model read earlier no longer holds the corrected note.
    search = Message.objects.get(session=session, role="tool", metadata__tool="memory_search")
    assert json.loads(search.content)["results"] == [{"id": paris.pk, "replaced_by": lyon.pk}]


def test_without_a_model_a_sentence_already_kept_is_not_kept_twice(world, drain, settings):
    settings.QORVEN_MODEL = ""
    kept = dated(remember(world.tenant_a, world.qor_a, world.alice, "i live in  PARIS"), MARCH)
    talk(world, drain, ("I live in Paris.", NOV_1), ("My bike is blue.", NOV_1.replace(hour=11)))
    compact(world, drain)
    talk(world, drain, ("My bike is blue. I live in Paris!", NOV_20))
    compact(world, drain)

    facts = {m.content: m for m in Memory.objects.filter(user=world.alice, type="fact")}
    assert set(facts) == {"i live in  PARIS", "Alice said on web (2026-11-20): My bike is blue."}
    assert facts["i live in  PARIS"].pk == kept.pk and facts["i live in  PARIS"].said_at == NOV_20
    assert facts["Alice said on web (2026-11-20): My bike is blue."].said_at == NOV_20


# --- dated by the message it came from ----------------------------------------------------


def test_a_flushed_note_is_dated_by_its_message_and_stays_older_than_a_later_remembered_one(
    world, fake, model_server, drain
):
    talk(world, drain, ("remember I live in Paris", NOV_1), ("I moved to Lyon", NOV_20))
    lyon = dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Lyon"), NOV_20.replace(second=30))
    compact(world, drain)  # the model says the Paris line's note, without saying which line

    paris = notes(world.alice)["Alice said: I live in Paris"]
    assert paris.said_at == NOV_1
    lines = memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="do I live in Paris or Lyon")
    assert [line.split(" — ")[1] for line in lines] == ["Alice said: I live in Paris", "Alice lives in Lyon"]
    assert lyon.pk in {m.pk for m in notes(world.alice).values()}


def test_a_flushed_note_never_replaces_a_note_said_after_its_message(world, fake, model_server, drain):
    talk(world, drain, ("I live in Paris", NOV_1), ("I moved to Lyon", NOV_20))
    lyon = dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Lyon"), NOV_20.replace(second=30))
    fake.flush_override = [flush_answer(
        {"text": "Alice lives in Paris", "said": "2026-11-01 10:00", "replaces": [lyon.pk]},
        {"text": "Alice moved to Lyon", "said": "2026-11-20 09:00", "known": lyon.pk},
    )]
    compact(world, drain)

    assert fake.calls["flush"] == 1  # the answer was taken as it came
    assert set(notes(world.alice)) == {"Alice lives in Lyon"}
    assert notes(world.alice)["Alice lives in Lyon"].said_at == NOV_20.replace(second=30)


def test_a_time_the_flush_gives_that_is_no_line_of_the_excerpt_falls_back_to_the_line_that_says_it(
    world, fake, model_server, drain
):
    talk(world, drain, ("my sister is called Ines", NOV_1), ("what a day", NOV_20))
    fake.flush_override = [flush_answer({"text": "Alice's sister is called Ines", "said": "yesterday"},
                                        {"text": "Alice had a long day", "said": "2026-11-21 09:00"})]
    compact(world, drain)

    assert notes(world.alice)["Alice's sister is called Ines"].said_at == NOV_1
    assert notes(world.alice)["Alice had a long day"].said_at == NOV_20


def test_a_group_chats_flush_is_shown_no_ones_notes(world, fake, model_server, drain):
    remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Paris")
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=None,
                              thread_id="-100777", group=True)
    inbound_accept(session=session, content="@aria remember Paris is lovely", channel="telegram",
                   sender_name="Alice", trust=Trust.PAIRED, user=world.alice)
    drain()
    session.refresh_from_db()
    compaction_rotate(session=session)
    assert "Alice lives in Paris" not in flush_request(model_server)["messages"][1]["content"]


def test_a_flushed_note_with_nothing_storable_in_it_is_left_out_and_the_rest_kept(world, fake, model_server, drain):
    """A note of control characters alone (a NUL) is no text once stored: it is left out,
    and the conversation is still condensed with the flush's other notes."""
    talk(world, drain, ("I play the cello", NOV_20))
    fake.flush_override = [flush_answer("\u0000", {"text": "\u0000\u0000"}, "Alice plays the cello")]
    compact(world, drain)
    assert set(notes(world.alice)) == {"Alice plays the cello"}
    assert Memory.objects.filter(user=world.alice, type="conversation_digest").exists()
