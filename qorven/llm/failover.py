"""A role's routes tried in order: a route that is down or rate-limited cools down and the
call moves on to the next, in the same turn.

A transient failure (ProviderUnavailable: 429, 5xx, a timeout, a connection error) fails
over, and so does a route that cannot answer anyone (ModelRefused of kind misconfigured or
quota: a wrong key or model, a spent quota — what fallbacks are for). A refusal of the
request itself (a content filter, an invalid request, a context overflow) is the answer,
whichever server gave it: another server would be asked the same thing.
A connection that closed before any answer is tried once more on the same route first
(a kept connection the server had just let go of: the SDK's retries, off on every route
but the last so that failing over is quick, would otherwise not cover it).
A route that failed cools down (qorven.runtime.cooldowns: a minute, doubling to an hour)
and is skipped while it cools; an answer clears it. A server that failed (5xx, a timeout,
a connection error) cools for every route to that server and model; a failure of the key
the route sent (429: its rate limit; a refused key; its spent quota) cools only that key
there, so another tenant's route with a key of its own goes on (a route with no key: the
server). Cooldowns live in the cache (Redis with REDIS_URL), so every process skips a
route any of them found down; with the cache away, no route is skipped as cooling and a
failure still fails over as it would (qorven.runtime.cooldowns). A route that
failed after part of its answer was streamed is not replaced: the person reads that answer
already.

A route whose capped server has no slot free for a worker's task (WaitingForSlot) is not
a failure: it is neither cooled down nor passed over, and the task comes back for it.
Neither is a route whose slots stayed taken for as long as the call could wait (SlotsBusy:
a heartbeat's or the summarizer's brief wait on its thread, a turn's QORVEN_MODEL_DEADLINE):
the server is busy with calls of ours, not failing, so it does not cool down and every
other call still goes to it. This one call moves on to the next route that has a slot
free now (it has waited long enough: a later capped route with none is passed over, its
place given up), and fails as SlotsBusy, transient, when none answers.
A ticket waiting in the queue of a route that is cooling down (it started while the ticket
waited) gives up that place as the call moves on: it would hold every other waiter back.

When every route is cooling, the call fails as ProviderUnavailable with the wait until the
first one is tried again: the turn is retried then, as for any transient failure.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from qorven.runtime.cooldowns import Cooldown, cooldown_clear, cooldown_longest, cooldown_start

from .errors import ModelError, ModelRefused, ProviderUnavailable, SlotsBusy, WaitingForSlot
from .provider import Completion, TokenCallback
from .routes import ModelRoute, provider_for

logger = logging.getLogger(__name__)

# Refusals that say the route cannot answer anyone, not that this request is refused.
ROUTE_BROKEN = ("misconfigured", "quota")
# Failures of the key the route sent, not of the server: they cool that key on the route
# (a route with no key: the route). A 429 is the key's limit (OpenAI's, OpenRouter's are
# per key or organisation); a 5xx, a timeout or a lost connection is the server's.
KEY_SCOPED = (*ROUTE_BROKEN, "rate_limited")


class FailoverProvider:
    def __init__(self, routes: Sequence[ModelRoute]) -> None:
        self.routes = list(routes)
        self.model = self.routes[0].model

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        # Each route's cooldown is read once: None, or one that may have run out (kept to
        # double the next one) and is cleared when the route answers.
        cooldowns = [_cooldown(r) for r in self.routes]
        ready = [(r, c) for r, c in zip(self.routes, cooldowns, strict=True) if c is None or c.remaining <= 0]
        if not ready:
            if all(c is not None and c.kind in ROUTE_BROKEN for c in cooldowns):
                # Each route was found unable to answer anyone: waiting will not change
                # that, fixing the first (the Qor's own) will.
                raise ModelRefused("every model route was refused for its settings or quota",
                                   kind=cooldowns[0].kind if cooldowns[0] else "misconfigured", model=self.model)
            wait = min(c.remaining for c in cooldowns if c is not None)
            raise ProviderUnavailable("every model route is cooling down after failures", kind="rate_limited",
                                      model=self.model, retry_after=max(wait, 1.0))
        self._leave_cooling(ready)
        streamed = False

        def relay(token: str) -> None:
            nonlocal streamed
            streamed = streamed or bool(token)  # "": the server is there, nothing shown yet
            if on_token is not None:
                on_token(token)

        failure: ModelError | None = None
        busy = False  # a route before this one stayed busy past the call's wait
        for n, (route, cooldown) in enumerate(ready):
            last = n == len(ready) - 1
            # The SDK's own retries only on the last route: before it, moving on is faster.
            provider = provider_for(route, max_retries=None if last else 0)
            try:
                try:
                    completion = provider.complete(messages=messages, tools=tools, on_token=relay)
                except ProviderUnavailable as exc:
                    # A connection that closed before any answer is tried once more at once (the
                    # SDK's own retries do it on the last route): one dropped connection does not
                    # send the turn elsewhere and cool the route down.
                    if last or streamed or not exc.dropped:
                        raise
                    completion = provider.complete(messages=messages, tools=tools, on_token=relay)
            except WaitingForSlot:
                if not busy:
                    raise
                # The call has waited its time already: it takes a slot free now or none.
                provider.slot_leave()
                continue
            except SlotsBusy as exc:
                logger.info("model route %s (%s) stayed busy: %s", route.label, route.model, exc.summary())
                busy = True
                failure = failure or exc
                continue
            except (ProviderUnavailable, ModelRefused) as exc:
                if isinstance(exc, ModelRefused) and exc.kind not in ROUTE_BROKEN:
                    raise
                # A refused key, its quota or its rate limit is that key's, not the server's:
                # another tenant's route to the same server and model with a key of its own
                # goes on (one on the same key shares it, the same key was limited).
                started = cooldown_start(base_url=route.base_url, model=route.model, retry_after=exc.retry_after,
                                         kind=exc.kind, key=route.key if exc.kind in KEY_SCOPED else "")
                logger.warning("model route %s (%s) failed (%s): %s", route.label, route.model, exc.summary(),
                               f"cooling down for {started.remaining:.0f} s" if started else "not cooled down")
                if streamed:
                    raise
                # What is said when no route answers: a transient failure (trying later may
                # work), else the first route's (the Qor's own, what its owner set).
                if failure is None or (exc.transient and not failure.transient):
                    failure = exc
                continue
            if cooldown is not None:
                cooldown_clear(base_url=route.base_url, model=route.model)
                cooldown_clear(base_url=route.base_url, model=route.model, key=route.key)
            completion.route = route.label
            return completion
        assert failure is not None
        raise failure

    def slot_look(self) -> None:
        """As the route a call made now would try first: the first one not cooling down."""
        if not any(route.max_concurrency for route in self.routes):
            return  # no slot to wait for: no cooldown to read
        for route in self.routes:
            cooldown = _cooldown(route)
            if cooldown is None or cooldown.remaining <= 0:
                provider_for(route).slot_look()
                return
            if route.max_concurrency:  # the call skips it: its place there holds others back
                provider_for(route).slot_leave()

    def _leave_cooling(self, ready: list[tuple[ModelRoute, Cooldown | None]]) -> None:
        """The ticket's places in the queues of capped routes this call skips as cooling."""
        skipped = [r for r in self.routes if r.max_concurrency and all(r is not x for x, _ in ready)]
        for route in skipped:
            provider_for(route).slot_leave()

    def slot_leave(self) -> None:
        """On every capped route: the ticket may wait in any of their queues."""
        for route in self.routes:
            if route.max_concurrency:
                provider_for(route).slot_leave()


def _cooldown(route: ModelRoute) -> Cooldown | None:
    return cooldown_longest(base_url=route.base_url, model=route.model, key=route.key)
