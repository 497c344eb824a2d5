"""Two workspaces sharing a model server capped at one call (`max_concurrency` 1): the
people of the route-slot reliability tests, and their messages sent through the API."""
from __future__ import annotations

import httpx

from qorven.runtime import route_slots
from tenancy.models import Qor
from tenancy.services import api_token_create

from ..factories.tenancy import MembershipFactory, UserFactory
from ..processes import wait_for

# Who sends what, in the order sent: a1 (Alice, workspace A) takes the slot; b1, a2, b2 wait.
TEXTS = ("a1", "b1", "a2", "b2")


def senders_capped(world) -> dict[str, str]:
    """Both workspaces' Qors capped at one call; each text's API token, in TEXTS' order."""
    Qor.objects.filter(pk__in=[world.qor_a.pk, world.qor_b.pk]).update(main_max_concurrency=1)
    dave = UserFactory(username="dave")
    MembershipFactory(tenant=world.tenant_b, user=dave)
    people = [(world.tenant_a, world.alice), (world.tenant_b, world.charlie), (world.tenant_a, world.bob),
              (world.tenant_b, dave)]
    return {text: api_token_create(tenant=tenant, user=user)[1] for text, (tenant, user) in zip(TEXTS, people)}


def say(base: str, token: str, text: str) -> None:
    response = httpx.post(f"{base}/v1/qors/aria/messages", json={"content": text}, timeout=30,
                          headers={"Authorization": f"Bearer {token}"})
    assert response.status_code in (200, 201), response.text


def three_waiting_behind_a1(base: str, tokens: dict[str, str], model_server, processes, worker) -> None:
    """a1 sent and its call answering (held by the test), then the three others sent and
    waiting in the route's queue."""
    say(base, tokens["a1"], "a1")
    assert wait_for(lambda: model_server.in_flight == 1, 30, processes=processes), worker.output[-3000:]
    for text in TEXTS[1:]:
        say(base, tokens[text], text)
    assert wait_for(lambda: route_slots.route_slot_waiting(base_url=model_server.base_url) == 3, 30,
                    processes=processes), worker.output[-3000:]
