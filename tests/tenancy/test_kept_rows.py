"""What a process keeps for its turns (qorven.runtime.row_cache): a Qor's MCP servers and
model fallbacks, the tenant's learned skills. A save or delete of one of them in this
process is seen by the next read; one made in another process (no signal reaches this
one) once QORVEN_ROUTE_CACHE_SECONDS have passed; a memory written drops none of them."""
from __future__ import annotations

import time

import pytest

from memory_app.models import LearnedSkill
from memory_app.selectors import skills_for
from tenancy.models import McpServer, ModelFallback
from tenancy.selectors import mcp_servers_read, model_fallbacks_read
from tenancy.trust import Trust

from ..factories.memory_app import remember

pytestmark = pytest.mark.django_db(transaction=True)


def kept(world) -> tuple[list[str], list[str], list[str]]:
    return ([s.name for s in mcp_servers_read(qor=world.qor_a)],
            [f.model for f in model_fallbacks_read(qor=world.qor_a, role="main")],
            [s.name for s in skills_for(tenant=world.tenant_a, trust=Trust.OWNER)])


def add_rows(world) -> None:
    McpServer.objects.create(qor=world.qor_a, name="calc", kind="http", url="https://mcp.example/calc")
    ModelFallback.objects.create(qor=world.qor_a, role="main", position=1, base_url="https://llm.example/v1",
                                 model="spare")
    LearnedSkill.objects.create(tenant=world.tenant_a, name="vault", description="Own.", body="x",
                                source=LearnedSkill.Source.ADMIN)


def test_a_memory_written_drops_nothing_kept_and_a_change_here_is_seen_at_once(world, django_assert_num_queries):
    add_rows(world)
    assert kept(world) == (["calc"], ["spare"], ["vault"])
    remember(world.tenant_a, world.qor_a, world.alice, "Alice's bike is a green Brompton")
    with django_assert_num_queries(0):
        assert kept(world) == (["calc"], ["spare"], ["vault"])

    McpServer.objects.get().delete()
    fallback = ModelFallback.objects.get()
    fallback.model = "spare-2"
    fallback.save(update_fields=["model"])
    LearnedSkill.objects.filter(name="vault").get().delete()
    assert kept(world) == ([], ["spare-2"], [])


def test_a_change_made_elsewhere_is_seen_once_the_cache_ages(world, settings):
    settings.QORVEN_ROUTE_CACHE_SECONDS = 1.0
    add_rows(world)
    assert kept(world) == (["calc"], ["spare"], ["vault"])
    cached_at = time.monotonic()
    # Another process edits them: no signal reaches this one.
    McpServer.objects.filter(qor=world.qor_a).update(name="calculator")
    ModelFallback.objects.filter(qor=world.qor_a).update(model="spare-2")
    LearnedSkill.objects.filter(tenant=world.tenant_a).update(enabled=False)
    assert kept(world) == (["calc"], ["spare"], ["vault"])  # kept

    time.sleep(max(0.0, cached_at + 1.1 - time.monotonic()))
    assert kept(world) == (["calculator"], ["spare-2"], [])
