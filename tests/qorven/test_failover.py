"""A role's model routes, each with its own key, failing over in order: a route that is
down or rate-limited cools down and the turn moves on to the next one in the same turn;
a refusal does not fail over. Scripted model servers on separate ports."""
from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from qorven.runtime.cooldowns import cooldown_get
from sessions_app.models import Message
from tenancy.models import Usage

from ..fakes.model_server import dropped, error, reply
from .failover_support import assistant_answers, primary_and_fallback
from .test_model_endpoints import ask

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rate_limited_route_fails_over_in_the_same_turn_then_is_skipped_while_it_cools(
    client, world, route_servers, drain
):
    primary, fallback = route_servers
    primary_and_fallback(world, primary, fallback)
    primary.default = error(429, "slow down", headers={"Retry-After": "1"})
    fallback.default = reply("From the fallback.")

    asked_at = time.time()
    ask(client, world, "first")
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 1
    [(content, metadata)] = assistant_answers()
    assert content == "From the fallback." and metadata["route"] == "main fallback 1"
    assert fallback.requests[0]["model"] == "fallback-model"
    # The key's rate limit: the route cools for that key (tests/qorven/test_cooldown_scope.py).
    cooling = cooldown_get(base_url=primary.base_url, model="primary-model", key="key-primary")
    # A minute from when it failed (however long the turn took to finish on a loaded machine).
    assert cooling is not None and asked_at + 60 <= cooling.until <= time.time() + 60 and cooling.failures == 1

    ask(client, world, "second")  # the primary cools down: not called at all
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 2
    assert [c for c, _ in assistant_answers()] == ["From the fallback.", "From the fallback."]
    assert list(Usage.objects.values_list("role", "route", "calls")) == [("main", "main fallback 1", 2)]


def test_each_route_gets_only_its_own_key(client, world, route_servers, drain):
    primary, fallback = route_servers
    primary_and_fallback(world, primary, fallback)
    primary.add(error(503, "down"))
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    ask(client, world, "first")
    drain()
    assert primary.authorizations == ["Bearer key-primary"]
    assert fallback.authorizations == ["Bearer key-fallback"]
    assert "key-primary" not in str(Message.objects.values_list("content", "metadata"))


def test_a_refusal_is_the_answer_and_does_not_fail_over(client, world, route_servers, drain):
    """The request itself was refused (a content filter, an invalid request): another
    server would be asked the same thing."""
    primary, fallback = route_servers
    primary_and_fallback(world, primary, fallback)
    primary.default = error(400, "this request is not allowed")
    fallback.default = reply("From the fallback.")
    ask(client, world, "hello")
    drain()
    assert fallback.requests == []
    assert Message.objects.get(role="system").metadata["notice"] == "model_refused"
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is None


@pytest.mark.parametrize("status", [401, 402, 404])
def test_a_route_whose_key_model_or_quota_is_wrong_fails_over_and_cools_down(
    client, world, route_servers, drain, status
):
    """A revoked key, a model the server does not have, a spent quota: the route cannot
    answer anyone, which is what fallbacks are for. The turn was failed with the fallback
    standing by; it now moves on to it, and the broken route is skipped while it cools."""
    primary, fallback = route_servers
    primary_and_fallback(world, primary, fallback)
    primary.default = error(status, "no")
    fallback.default = reply("From the fallback.")
    ask(client, world, "hello")
    drain()
    assert [c for c, _ in assistant_answers()] == ["From the fallback."]
    assert not Message.objects.filter(role="system").exists()
    assert cooldown_get(base_url=primary.base_url, model="primary-model", key="key-primary") is not None
    ask(client, world, "again")
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 2


def test_when_every_route_is_wrong_the_first_ones_failure_is_said(client, world, route_servers, drain):
    primary, fallback = route_servers
    primary_and_fallback(world, primary, fallback)
    primary.default = error(401, "bad key")
    fallback.default = error(402, "quota")
    ask(client, world, "hello")
    drain()
    assert len(fallback.requests) == 1
    assert Message.objects.get(role="system").metadata["notice"] == "model_misconfigured"
    # Both cool down now, and waiting for them would not help: the next message is told the
    # same at once, not "unavailable, trying again later".
    ask(client, world, "and now?")
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 1
    notices = Message.objects.filter(role="system").order_by("seq")
    assert [n.metadata["notice"] for n in notices] == ["model_misconfigured", "model_misconfigured"]


def test_an_answer_clears_a_cooldown_and_every_route_cooling_waits_for_the_first_to_end(
    client, world, route_servers, drain, settings
):
    primary, fallback = route_servers
    primary_and_fallback(world, primary, fallback)
    settings.QORVEN_ANSWER_ATTEMPTS = 1  # one try: the notice shows what the turn decided
    primary.default = error(500, "down")
    fallback.default = error(502, "down too")
    ask(client, world, "nobody answers")
    drain()
    assert len(primary.requests) == 1 and len(fallback.requests) == 1
    assert Message.objects.get(role="user").answer_state == "failed"
    before = len(primary.requests), len(fallback.requests)
    ask(client, world, "still cooling")
    drain()
    assert (len(primary.requests), len(fallback.requests)) == before  # neither called while both cool

    for server, model in ((primary, "primary-model"), (fallback, "fallback-model")):  # the waits end
        _expire(server.base_url, model)
    fallback.default = reply("Back.")
    ask(client, world, "again")
    drain()
    assert assistant_answers()[-1][0] == "Back."
    assert cooldown_get(base_url=fallback.base_url, model="fallback-model") is None  # cleared by the answer
    again = cooldown_get(base_url=primary.base_url, model="primary-model")  # failed again: twice as long
    assert again.failures == 2 and 119 <= again.remaining <= 120


def _expire(base_url: str, model: str) -> None:
    """The route's cooldown as it is once its wait has passed."""
    from qorven.runtime import cooldowns

    found = cooldown_get(base_url=base_url, model=model)
    cache.set(cooldowns._key(base_url, model), (time.time() - 1, found.failures), timeout=3600)


def test_a_connection_dropped_before_any_answer_is_tried_again_on_the_same_route(
    client, world, route_servers, drain
):
    """A connection that closes without an answer (one the server had just let go of, a
    restart) is tried once more at once before the turn fails over: one such blip does not
    send the turn to the fallback and cool the route down for a minute."""
    primary, fallback = route_servers
    primary_and_fallback(world, primary, fallback)
    primary.add(dropped())
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    ask(client, world, "hello")
    drain()
    assert [content for content, _ in assistant_answers()] == ["From the primary."]
    assert len(primary.requests) == 2 and fallback.requests == []
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is None


def test_a_route_that_drops_twice_fails_over_as_before(client, world, route_servers, drain):
    primary, fallback = route_servers
    primary_and_fallback(world, primary, fallback)
    primary.add(dropped())
    primary.add(dropped())
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")
    ask(client, world, "hello")
    drain()
    assert [content for content, _ in assistant_answers()] == ["From the fallback."]
    assert len(primary.requests) == 2
    assert cooldown_get(base_url=primary.base_url, model="primary-model") is not None


def test_one_tenants_revoked_key_does_not_send_another_tenants_good_key_to_its_fallback(route_servers):
    """A 401 says the key is wrong, not the server: a Qor calling the same server and
    model with a key of its own that works is still answered there, not skipped as
    cooling down (for up to an hour) because someone else's key was revoked."""
    from qorven.llm.failover import FailoverProvider
    from qorven.llm.routes import ModelRoute

    primary, fallback = route_servers
    primary.add(error(401, "invalid api key"))
    primary.default = reply("From the primary.")
    fallback.default = reply("From the fallback.")

    def routes(key: str) -> list[ModelRoute]:
        return [ModelRoute(base_url=primary.base_url, model="primary-model", num_ctx=8192, api_key=key),
                ModelRoute(base_url=fallback.base_url, model="fallback-model", num_ctx=8192, api_key="key-fallback",
                           label="main fallback 1")]

    revoked = FailoverProvider(routes("key-revoked")).complete(messages=[{"role": "user", "content": "hi"}])
    assert revoked.content == "From the fallback."
    good = FailoverProvider(routes("key-good")).complete(messages=[{"role": "user", "content": "hi"}])
    assert good.content == "From the primary."
    assert len(primary.requests) == 2
