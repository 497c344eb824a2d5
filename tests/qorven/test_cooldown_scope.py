"""Whose a route's cooldown is: a 429 answered to one API key cools that key on the route,
so another workspace calling the same server and model with a key of its own is still
answered there; a server that is down (5xx), or a 429 to a route with no key, cools the
route for everyone; two workspaces on the host's key share its cooldown. Two tenants'
Qors on one scripted model server, each with a fallback on another."""
from __future__ import annotations

import json

import pytest

from qorven.runtime.cooldowns import cooldown_clear, cooldown_get, cooldown_start
from sessions_app.models import Message
from tenancy.models import ModelFallback, Qor
from tenancy.services import api_token_create

from ..fakes.model_server import ModelServer, error, reply

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = ("key-acme", "key-globex", "key-host", "")


@pytest.fixture
def servers(settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]  # the fakes listen on loopback
    settings.QORVEN_MODEL_RETRIES = 0
    started = [ModelServer().start(), ModelServer().start()]  # new ports: no cooldown of an earlier test
    primary, fallback = started
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    yield started
    for server in started:
        for key in KEYS:
            cooldown_clear(base_url=server.base_url, model="shared-model", key=key)
        server.stop()


def _route(qor: Qor, primary: ModelServer, fallback: ModelServer, key: str) -> None:
    Qor.objects.filter(pk=qor.pk).update(main_base_url=primary.base_url, main_model="shared-model", main_api_key=key)
    ModelFallback.objects.create(qor=qor, role="main", position=1, base_url=fallback.base_url,
                                 model="shared-model", api_key="key-fallback")


def _ask(client, tenant, user, content: str) -> None:
    token = api_token_create(tenant=tenant, user=user)[1]
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201


def _last_answer(qor: Qor) -> tuple[str, str]:
    message = Message.objects.filter(session__qor=qor, role="assistant").order_by("seq").last()
    return message.content, message.metadata.get("route", "")


def _status(client, drain, tenant, user, qor: Qor) -> str:
    _ask(client, tenant, user, "/status")
    drain()
    return _last_answer(qor)[0]


def test_one_workspaces_rate_limited_key_does_not_send_another_workspace_to_its_fallback(
    host, client, world, servers, drain
):
    """Acme's own key hits its rate limit at the shared server: acme's turns go to its
    fallback while that key cools, and globex (its own key, same server and model) is
    still answered by its primary route. Before, the 429 cooled the server and model
    for every workspace: globex's turn went to its fallback for a minute."""
    primary, fallback = servers
    _route(world.qor_a, primary, fallback, "key-acme")
    _route(world.qor_b, primary, fallback, "key-globex")
    primary.keyed["key-acme"] = error(429, "rate limit reached for your organization")

    _ask(client, world.tenant_a, world.alice, "hello from acme")
    drain()
    assert _last_answer(world.qor_a) == ("From the fallback.", "main fallback 1")

    _ask(client, world.tenant_b, world.charlie, "hello from globex")
    drain()
    assert _last_answer(world.qor_b) == ("From the primary.", "main")
    assert primary.authorizations == ["Bearer key-acme", "Bearer key-globex"]

    _ask(client, world.tenant_a, world.alice, "again from acme")  # acme's key still cools: not called
    drain()
    assert _last_answer(world.qor_a) == ("From the fallback.", "main fallback 1")
    assert len(primary.requests) == 2

    assert "main: shared-model — cooling down for" in _status(client, drain, world.tenant_a, world.alice, world.qor_a)
    assert "main: shared-model — ready" in _status(client, drain, world.tenant_b, world.charlie, world.qor_b)
    acme = host.get(f"/admin/qorven/qor/{world.qor_a.pk}/change/").content.decode()
    globex = host.get(f"/admin/qorven/qor/{world.qor_b.pk}/change/").content.decode()
    assert "main: shared-model — cooling down for" in acme
    assert "main: shared-model — ready" in globex
    assert "key-acme" not in acme and "key-globex" not in globex


@pytest.mark.parametrize("failure, key", [
    (error(503, "down"), "key-acme"),  # the server is down: for everyone, whatever their key
    (error(429, "slow down"), ""),  # no key: the server limits by something else than a key
])
def test_a_server_that_is_down_or_limits_without_keys_cools_for_every_workspace(
    client, world, servers, drain, failure, key
):
    primary, fallback = servers
    _route(world.qor_a, primary, fallback, key)
    _route(world.qor_b, primary, fallback, key.replace("acme", "globex"))
    primary.add(failure)

    _ask(client, world.tenant_a, world.alice, "hello from acme")
    drain()
    _ask(client, world.tenant_b, world.charlie, "hello from globex")
    drain()
    assert _last_answer(world.qor_a) == ("From the fallback.", "main fallback 1")
    assert _last_answer(world.qor_b) == ("From the fallback.", "main fallback 1")
    assert len(primary.requests) == 1


def test_workspaces_on_the_hosts_key_share_its_rate_limit(client, world, servers, drain, settings):
    """Neither Qor has a key of its own: both send the host's to the server the host
    trusts with it, and that key's limit is reached for both."""
    primary, fallback = servers
    settings.OPENAI_API_KEY = "key-host"
    settings.QORVEN_MODEL_KEY_URLS = [primary.base_url]
    _route(world.qor_a, primary, fallback, "")
    _route(world.qor_b, primary, fallback, "")
    primary.keyed["key-host"] = error(429, "rate limit reached for your organization")

    _ask(client, world.tenant_a, world.alice, "hello from acme")
    drain()
    _ask(client, world.tenant_b, world.charlie, "hello from globex")
    drain()
    assert _last_answer(world.qor_b) == ("From the fallback.", "main fallback 1")
    assert primary.authorizations == ["Bearer key-host"]


@pytest.mark.parametrize("cooled, other", [
    (("http://llm.test/v1|m", "x", ""), ("http://llm.test/v1", "m|x", "")),
    (("http://llm.test/v1", "m|k", ""), ("http://llm.test/v1", "m", "k")),
])
def test_a_routes_cooldown_is_never_another_routes_whatever_its_names_hold(cooled, other):
    """A base URL, a model or a key holding the separator named another route's cooldown:
    a workspace admin who sets a Qor's base URL and model could cool down another
    workspace's route (its server, its model, its key) by failing on their own."""
    (base, model, key), (other_base, other_model, other_key) = cooled, other
    try:
        cooldown_start(base_url=base, model=model, key=key)
        assert cooldown_get(base_url=base, model=model, key=key) is not None
        assert cooldown_get(base_url=other_base, model=other_model, key=other_key) is None
    finally:
        cooldown_clear(base_url=base, model=model, key=key)
        cooldown_clear(base_url=other_base, model=other_model, key=other_key)
