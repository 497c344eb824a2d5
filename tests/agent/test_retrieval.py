"""What prompt assembly gets from memory: the best matches, short, the user's own."""
from __future__ import annotations

import pytest

from qorven.agent.retrieval import MEMORY_CHARS_IN_PROMPT, memories_for

from ..factories.memory_app import remember

pytestmark = pytest.mark.django_db


def test_the_best_memories_for_the_message_go_in_each_on_one_short_line(world):
    remember(world.tenant_a, world.qor_a, world.alice, "Conversation about the garden.\n" + "tomatoes " * 300,
             type="conversation_digest")
    remember(world.tenant_a, world.qor_a, world.alice, "Alice grows tomatoes on her balcony")
    remember(world.tenant_b, world.qor_b, world.charlie, "Charlie grows tomatoes too")
    lines = memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, query="how are my tomatoes?")
    assert len(lines) == 2 and all("Charlie" not in line for line in lines)
    assert "(fact) Alice grows tomatoes on her balcony" in lines
    digest = next(line for line in lines if line.startswith("(conversation_digest)"))
    assert "\n" not in digest and digest.endswith("…")
    assert len(digest) <= len("(conversation_digest) ") + MEMORY_CHARS_IN_PROMPT
    assert memories_for(tenant=world.tenant_a, qor=world.qor_a, user=None, query="tomatoes") == []
