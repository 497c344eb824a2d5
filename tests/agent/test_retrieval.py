"""What prompt assembly gets from memory: the best matches, short, the user's own."""
from __future__ import annotations

import pytest

from qorven.agent.retrieval import MEMORY_CHARS_IN_PROMPT, memories_for

from ..factories.memory_app import remember
from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db


def text(line: str) -> str:
    """A memory's text, from its line in the prompt ("#12 · fact · 14 Mar 2026 — text")."""
    return line.split(" — ", 1)[1]


def test_the_best_memories_for_the_message_go_in_each_on_one_short_line(world):
    remember(world.tenant_a, world.qor_a, world.alice, "Conversation about the garden.\n" + "tomatoes " * 300,
             type="conversation_digest")
    remember(world.tenant_a, world.qor_a, world.alice, "Alice grows tomatoes on her balcony")
    remember(world.tenant_b, world.qor_b, world.charlie, "Charlie grows tomatoes too")
    lines = memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="how are my tomatoes?")
    assert len(lines) == 2 and all("Charlie" not in line for line in lines)
    assert text(lines[1]) == "Alice grows tomatoes on her balcony"  # the newer of the two
    digest = lines[0]
    assert " · conversation digest · " in digest and "\n" not in digest and digest.endswith("…")
    assert len(text(digest)) == MEMORY_CHARS_IN_PROMPT
    assert memories_for(tenant=world.tenant_a, qor=world.qor_a, user=None, query="tomatoes") == []


def test_a_chinese_or_japanese_message_brings_the_memories_that_share_its_words(world):
    remember(world.tenant_a, world.qor_a, world.alice, "我最喜欢的寿司店是银座的次郎")
    remember(world.tenant_a, world.qor_a, world.alice, "私は毎朝抹茶を飲みます")
    remember(world.tenant_a, world.qor_a, world.alice, "Alice grows tomatoes on her balcony")
    remember(world.tenant_a, world.qor_a, world.bob, "我也喜欢寿司店")
    assert [text(line) for line in memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice,
                                                query="我最喜欢的寿司店叫什么名字？")] == ["我最喜欢的寿司店是银座的次郎"]
    assert [text(line) for line in memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice,
                                                query="私が毎朝飲むものは何？")] == ["私は毎朝抹茶を飲みます"]


@pytest.mark.django_db(transaction=True)
def test_the_model_is_sent_the_memory_a_chinese_question_is_about(client, world, model_server, drain):
    import json

    from tenancy.services import api_token_create

    remember(world.tenant_a, world.qor_a, world.alice, "我最喜欢的寿司店是银座的次郎")
    remember(world.tenant_a, world.qor_a, world.alice, "Alice的passport号码是4471")
    remember(world.tenant_a, world.qor_a, world.bob, "我最喜欢的寿司店在大阪")
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(reply("是银座的次郎。"))
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "我最喜欢的寿司店叫什么？"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201, response.content
    drain()
    (request,) = model_server.requests
    system = request["messages"][0]["content"]
    remembered = system.split("## What you remember about this user\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [text(line) for line in remembered[1:]] == ["我最喜欢的寿司店是银座的次郎"]


def _dated(memory, when):
    """The memory as if saved at `when` (a month ago, a season ago)."""
    from memory_app.models import Memory

    Memory.objects.filter(pk=memory.pk).update(created_at=when)
    memory.refresh_from_db()
    return memory


def test_memories_in_the_prompt_carry_their_id_and_date_in_the_persons_zone_oldest_first(world):
    from datetime import UTC, datetime

    from tenancy.models import Membership

    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).update(timezone="Asia/Tokyo")
    paris = _dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Paris"),
                   datetime(2026, 3, 14, 23, 30, tzinfo=UTC))  # the 15th in Tokyo
    lyon = _dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Lyon now"),
                  datetime(2026, 6, 2, 8, 0, tzinfo=UTC))
    # The better match comes first in the search; the prompt still reads old to new.
    lines = memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="where does Alice live now?")
    assert lines == [f"#{paris.pk} · fact · 15 Mar 2026 — Alice lives in Paris",
                     f"#{lyon.pk} · fact · 02 Jun 2026 — Alice lives in Lyon now"]


def test_a_reminder_in_the_prompt_says_when_it_is_due_and_whether_it_was_done(world):
    from datetime import UTC, datetime, timedelta

    from django.utils import timezone

    from memory_app.services import reminder_add, reminders_mark_done

    due = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=3)  # done this morning: still in view
    done, _ = reminder_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, content="Call the plumber",
                           due=due)
    reminders_mark_done(tenant=world.tenant_a, reminder_ids=[done.pk], at=due + timedelta(minutes=5))
    later = datetime(2099, 1, 2, 8, 0, tzinfo=UTC)
    waiting, _ = reminder_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, content="Call the plumber back",
                              due=later)
    lines = memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="plumber")
    assert sorted(lines) == sorted([
        f"#{done.pk} · reminder · {done.created_at:%d %b %Y} · due {due:%d %b %Y %H:%M}, done — Call the plumber",
        f"#{waiting.pk} · reminder · {waiting.created_at:%d %b %Y} · due 02 Jan 2099 08:00 — Call the plumber back",
    ])


@pytest.mark.django_db(transaction=True)
def test_the_model_reads_that_a_newer_memory_overrides_an_older_one(client, world, model_server, drain):
    import json
    from datetime import UTC, datetime

    from tenancy.services import api_token_create

    _dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Lyon"),
           datetime(2026, 6, 2, 8, 0, tzinfo=UTC))
    _dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Paris"),
           datetime(2026, 3, 14, 8, 0, tzinfo=UTC))
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(reply("Lyon."))
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "Where do I live?"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201, response.content
    drain()
    system = model_server.requests[0]["messages"][0]["content"]
    section = system.split("## What you remember about this user\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "newer" in section[0] and "overrides" in section[0]
    assert [line.rsplit(" — ", 1)[1] for line in section[1:]] == ["Alice lives in Paris", "Alice lives in Lyon"]


def test_a_note_said_again_is_dated_when_last_said_and_a_flushed_one_when_it_was_said(world):
    from datetime import UTC, datetime

    from memory_app.services import memory_add

    paris = _dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Paris"),
                   datetime(2026, 3, 14, 8, 0, tzinfo=UTC))
    lyon = _dated(remember(world.tenant_a, world.qor_a, world.alice, "Alice lives in Lyon"),
                  datetime(2026, 6, 2, 8, 0, tzinfo=UTC))
    # Stored only now, by a compaction of a conversation held in January: dated January.
    flushed, _ = memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="fact",
                            content="Alice lives in Nantes", period_start=datetime(2026, 1, 5, 8, 0, tzinfo=UTC),
                            period_end=datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    # September: back in Paris, said in the very words of March.
    again, created = memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="fact",
                                content="alice lives in  Paris", period_start=datetime(2026, 9, 1, 8, 0, tzinfo=UTC),
                                period_end=datetime(2026, 9, 1, 9, 0, tzinfo=UTC))
    assert (again.pk, created) == (paris.pk, False)
    # A flush of an older conversation saying it too does not date it back.
    memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="fact", content="Alice lives in Paris",
               period_start=datetime(2026, 2, 1, 8, 0, tzinfo=UTC), period_end=datetime(2026, 2, 1, 9, 0, tzinfo=UTC))
    lines = memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="where does Alice live?")
    assert lines == [f"#{flushed.pk} · fact · 05 Jan 2026 — Alice lives in Nantes",
                     f"#{lyon.pk} · fact · 02 Jun 2026 — Alice lives in Lyon",
                     f"#{paris.pk} · fact · 01 Sep 2026 — Alice lives in Paris"]
