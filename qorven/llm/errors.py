"""How a model call fails, classified once, here.

- `ProviderUnavailable` (transient): the server could not be reached, timed out, answered
  5xx, 408, 409 or 429 past the SDK's own retries, or the deadline passed. Trying again
  later may work.
- `ModelRefused` (permanent): any other 4xx — the request was refused (a content filter,
  an invalid request), the key or model is wrong, the provider's quota is spent. The same
  request will fail the same way.
- `ContextLengthExceeded` (permanent unless the prompt shrinks): the prompt did not fit.
- `SlotsBusy` (transient, a ProviderUnavailable): every slot of a capped server stayed
  taken for as long as the call could wait.
- `WaitingForSlot` (not a failure): a call made for a worker's task found every slot of
  its capped server taken; it keeps its place in the queue, and its task comes back.

Each carries `kind`, which picks the notice a person reads (qorven.agent.notices), and
`detail`: the provider's own words, for the log and the admin only — never for a surface.
"""
from __future__ import annotations


class ModelError(Exception):
    kind = "unreachable"
    transient = False

    def __init__(
        self, detail: str, *, kind: str | None = None, status: int | None = None, model: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        if kind is not None:
            self.kind = kind
        self.status = status
        self.model = model
        self.retry_after = retry_after

    host = ""  # the model server's host, set by the provider that tried it
    # The connection closed (or could not be made) before any answer, and not by a timeout:
    # a kept connection the server had just let go of, a restart. Trying again at once may work.
    dropped = False

    def summary(self) -> str:
        """A short, safe description for owners: the status, the model and the server's
        host (not its path, which may carry a key), no provider text."""
        parts = [f"HTTP {self.status}" if self.status else self.kind.replace("_", " ")]
        if self.model:
            parts.append(f"model {self.model}" + (f" at {self.host}" if self.host else ""))
        elif self.host:
            parts.append(f"at {self.host}")
        return ", ".join(parts)


class ProviderUnavailable(ModelError):
    """The model server could not answer now (kinds: unreachable, rate_limited). The
    user's message stays stored; it can be answered later."""

    transient = True


class SlotsBusy(ProviderUnavailable):
    """Every slot of the route's capped server (`max_concurrency`) stayed taken for as
    long as the call could wait: the server is busy with other calls of ours, not
    failing. Told apart where a wait must not count as a failed try (a heartbeat run)."""

    kind = "rate_limited"


class ModelRefused(ModelError):
    """The model server refused the request for good (kinds: refused, misconfigured,
    quota)."""

    kind = "refused"


class ContextLengthExceeded(ModelError):
    """The prompt did not fit the model's context window."""

    kind = "too_long"


class WaitingForSlot(ModelError):
    """Every slot of the route's capped server is taken, and the call was made for a
    worker's task (qorven.runtime.route_slots.slot_ticket): it ends without asking, its
    place in the queue kept, and the task comes back after `retry_after` seconds. Not a
    failure: no try is counted for it, and a route is not failed over or cooled down."""

    kind = "waiting"
    transient = True
    # Whose queue the place is in: its server and cap, set by the provider that waited
    # (the task gives the place up there even once its route has changed).
    base_url = ""
    cap = 0
