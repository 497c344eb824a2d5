"""Model route cooldowns while the cache they live in (Redis) is away: a cooldown only
spares a route known to be failing, so a route whose cooldown cannot be read is tried as
not cooling, and a cooldown that cannot be written leaves the failure it was for to fail
over as it would. The cache is a Redis server of the test's own, really stopped; the rest
of the layout as it is."""
from __future__ import annotations

import json
import logging

import pytest
from django.utils import timezone

from qorven.runtime.cooldowns import cooldown_get
from sessions_app.models import Message
from tenancy.models import ModelFallback, Qor
from tenancy.services import api_token_create

from ..fakes.model_server import ModelServer, error, reply

pytestmark = pytest.mark.django_db(transaction=True)

COOLDOWNS_AWAY = "model route cooldowns"  # how the log line about the cache away begins



@pytest.fixture
def servers(settings, world):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]  # the fakes listen on loopback
    settings.QORVEN_MODEL_RETRIES = 0
    primary, fallback = ModelServer().start(), ModelServer().start()
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=primary.base_url, main_model="primary-model",
                                                 main_api_key="key-primary-secret")
    ModelFallback.objects.create(qor=world.qor_a, role="main", position=1, base_url=fallback.base_url,
                                 model="fallback-model", api_key="key-fallback-secret")
    yield primary, fallback
    primary.stop()
    fallback.stop()


def _ask(client, world, content: str) -> None:
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201


def _said() -> list[tuple[str, str]]:
    """What the person read, in order: (role, content or the notice's key)."""
    return [(m.role, m.metadata.get("notice") or m.content)
            for m in Message.objects.filter(role__in=("assistant", "system")).order_by("seq")]


def test_with_the_cache_away_each_route_is_tried_as_not_cooling(client, world, servers, drain, cache_redis,
                                                               caplog):
    """Redis away as two turns read their routes' cooldowns: each is answered by the
    primary, and the log says once that cooldowns cannot be read. Before, the read raised
    Redis' ConnectionError out of the model call and the turn's task: neither answer nor
    notice once the worker was done, the model server never asked."""
    primary, _ = servers
    stop, _ = cache_redis
    caplog.set_level(logging.WARNING, logger="qorven.runtime.cooldowns")
    stop()
    _ask(client, world, "first")
    drain()
    _ask(client, world, "second")
    drain()
    assert _said() == [("assistant", "From the primary."), ("assistant", "From the primary.")]
    assert len(primary.requests) == 2
    away = [r for r in caplog.records if r.name == "qorven.runtime.cooldowns"]
    assert len(away) == 1 and away[0].getMessage().startswith(COOLDOWNS_AWAY)
    assert "secret" not in caplog.text


def test_with_the_cache_away_a_failing_route_fails_over_and_cools_once_the_cache_is_back(
    client, world, servers, drain, cache_redis, caplog
):
    """The primary answers 503 while Redis is away: the turn goes on to the fallback as it
    would (its cooldown is not kept). Once Redis is back, the next 503 cools the route as
    before and the turn after it skips the primary. Before, the turn's task failed on
    the cooldown's read (and would have on its write, replacing the 503): no answer."""
    primary, fallback = servers
    stop, start = cache_redis
    primary.add(error(503, "down"))
    stop()
    _ask(client, world, "while the cache is away")
    drain()
    assert _said() == [("assistant", "From the fallback.")]
    assert len(primary.requests) == 1
    assert "model route main (primary-model) failed (HTTP 503, model primary-model at 127.0.0.1:" in caplog.text
    assert "not cooled down" in caplog.text  # the log does not claim a cooldown it could not keep

    start()
    primary.add(error(503, "down again"))
    _ask(client, world, "once it is back")
    drain()
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is not None
    _ask(client, world, "while the primary cools")
    drain()
    assert len(primary.requests) == 2 and len(fallback.requests) == 3
    assert [content for _, content in _said()] == ["From the fallback."] * 3


def test_with_the_cache_away_a_heartbeat_run_is_answered_by_its_route(world, servers, cache_redis):
    """A heartbeat's role with a fallback route, run while Redis is away: the run is
    answered by its first route. Before, the cooldown's read raised out of the run."""
    from qorven.agent.heartbeat_runs import run_heartbeat

    from ..factories.heartbeats_app import beat

    primary, fallback = servers
    qor = Qor.objects.get(pk=world.qor_a.pk)
    ModelFallback.objects.create(qor=qor, role="heartbeat", position=1, base_url=fallback.base_url,
                                 model="fallback-model", api_key="key-fallback-secret")
    check_in = beat(qor, name="check-in", prompt="Anything to tell Alice?", owner=world.alice)
    stop, _ = cache_redis
    stop()
    result = run_heartbeat(tenant_id=qor.tenant_id, heartbeat_id=check_in.pk,
                           tick=timezone.now().replace(microsecond=0))
    assert (result.status, result.output) == ("ok", "From the primary.")
    assert len(primary.requests) == 1 and fallback.requests == []


def test_with_the_cache_away_the_admin_and_status_say_the_routes_state_is_unknown(
    host, client, world, servers, drain, cache_redis
):
    """A route's state is its cooldown, kept in the cache: with the cache away it cannot be
    read, and the admin and /status say so. Before, both said "ready" — of a route that
    may well be cooling down."""
    from qorven.runtime.cooldowns import STATE_UNKNOWN

    stop, _ = cache_redis
    stop()
    page = host.get(f"/admin/qorven/qor/{world.qor_a.pk}/change/").content.decode()
    assert f"main: primary-model — {STATE_UNKNOWN}" in page  # the Qor's own route
    assert f">{STATE_UNKNOWN}<" in page  # the fallback's row
    assert ">ready<" not in page and "— ready" not in page
    _ask(client, world, "/status")
    drain()
    status = Message.objects.filter(role="assistant").order_by("seq").last().content
    assert f"main: primary-model — {STATE_UNKNOWN}" in status
    assert f"main fallback 1: fallback-model — {STATE_UNKNOWN}" in status
