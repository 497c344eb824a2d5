"""What prompt assembly gets from memory: the best matches, short, the user's own."""
from __future__ import annotations

import pytest

from qorven.agent.retrieval import MEMORY_CHARS_IN_PROMPT, memories_for

from ..factories.memory_app import remember
from ..fakes.model_server import reply

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


def test_a_chinese_or_japanese_message_brings_the_memories_that_share_its_words(world):
    remember(world.tenant_a, world.qor_a, world.alice, "我最喜欢的寿司店是银座的次郎")
    remember(world.tenant_a, world.qor_a, world.alice, "私は毎朝抹茶を飲みます")
    remember(world.tenant_a, world.qor_a, world.alice, "Alice grows tomatoes on her balcony")
    remember(world.tenant_a, world.qor_a, world.bob, "我也喜欢寿司店")
    assert memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice,
                        query="我最喜欢的寿司店叫什么名字？") == ["(fact) 我最喜欢的寿司店是银座的次郎"]
    assert memories_for(tenant=world.tenant_a, qor=world.qor_a, user=world.alice,
                        query="私が毎朝飲むものは何？") == ["(fact) 私は毎朝抹茶を飲みます"]


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
    remembered = system.split("## What you remember about this user\n", 1)[1].split("\n\n", 1)[0]
    assert remembered == "- (fact) 我最喜欢的寿司店是银座的次郎"
