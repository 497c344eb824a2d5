"""How many webhooks may wait to be stored by channels_app.webhook_ingest, and whose.

The bound is per server process: MAX_WAITING webhooks, MAX_WAITING_BYTES of bodies. It is
shared by *parties*: each workspace whose binding a waiting webhook was screened as signed
for (its tenant's id: one share however many bots and addresses it binds), and the
webhooks the screening could not tie to one (UNVERIFIED: a binding this process has not
read lately, or junk posted by anyone) as one more. With k parties waiting, each
may hold 1/k of what RESERVE leaves of both bounds, and a party holding nothing is taken
while the whole bound fits. A flood of junk, or one workspace's platform flooding (a big
group), is so answered 503 past its share while another workspace's webhooks are taken.

Why a share at admission and not, say, evicting the flood's newest webhook for a
newcomer: one comparison under the lock, and nothing taken is ever answered 503 later.
Its cost: a party alone holds at most 90% of the bound (4,500 webhooks, 57.6 MB), and
parties that filled their shares before more came keep what they hold until the storing
thread takes it (fast: it drains first in, first out), while later ones have the reserve.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Iterable

logger = logging.getLogger("channels_app.webhook_ingest")  # the lines of the path they are about

# Webhooks (and bytes of their bodies) taken and not yet answered, at most, per server
# process. One process stores ~2,500 webhooks a second at its peak (docs/performance.md):
# 5,000 is two seconds of that, more than a healthy database ever leaves waiting, and a
# webhook waiting longer nears the platforms' own timeouts (Slack's is three seconds),
# after which they deliver it again anyway. Webhooks are small (a few KB); the bytes bound
# is for large bodies (up to QORVEN_MAX_BODY each): 64 of 1 MB. Either way the memory a
# backlog holds stays in the tens of MB. (Tests set them smaller on this module.)
MAX_WAITING = 5000
MAX_WAITING_BYTES = 64 * 1024 * 1024
# 1/RESERVE of both bounds no party may take: room for one holding nothing yet while the
# others hold their shares (500 webhooks, 6.4 MB).
RESERVE = 10
UNVERIFIED = "unverified"  # the party of the webhooks no binding of the cache signs


class WaitingBound:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting = 0  # webhooks taken and not yet answered
        self._waiting_bytes = 0  # the sizes of their bodies
        self._parties: dict[Hashable, list[int]] = {}  # party → [webhooks, bytes] of those
        self._refused = 0  # webhooks refused in the current burst (0: none is going on)

    def waiting(self) -> tuple[int, int]:
        return self._waiting, self._waiting_bytes

    def fits(self, size: int) -> bool:
        """Whether the whole bound has room for `size` bytes (a glance, unlocked)."""
        # An empty queue takes any body QORVEN_MAX_BODY lets through, however it is set.
        return self._waiting == 0 or (self._waiting < MAX_WAITING and self._waiting_bytes + size <= MAX_WAITING_BYTES)

    def take(self, party: Hashable, size: int) -> bool:
        """Count a webhook of `party` waiting, if the bound and its share have room for it."""
        with self._lock:
            held = self._parties.get(party)
            if not self.fits(size) or held is not None and not self._within_share(held, size):
                return False
            held = self._parties.setdefault(party, [0, 0])
            held[0] += 1
            held[1] += size
            self._waiting += 1
            self._waiting_bytes += size
            return True

    def _within_share(self, held: list[int], size: int) -> bool:
        sharing = len(self._parties)
        return (held[0] < (MAX_WAITING - MAX_WAITING // RESERVE) // sharing
                and held[1] + size <= (MAX_WAITING_BYTES - MAX_WAITING_BYTES // RESERVE) // sharing)

    def refuse(self, party: Hashable | None = None) -> None:
        """Count a webhook refused: one warning when a burst of them starts, not one each."""
        with self._lock:
            self._refused += 1
            starts = self._refused == 1
            held = self._parties.get(party, [0, 0])[0] if party is not None else 0
        if starts:
            whose = "" if party is None else f", {held} of them {'unverified' if party == UNVERIFIED else f'for workspace {party}'}"
            logger.warning("webhooks are answered 503 (the platforms deliver them again): %d (%d bytes) are"
                           " waiting to be stored already%s — the database is slow or away, or more arrive"
                           " than it takes", self._waiting, self._waiting_bytes, whose)

    def release(self, answered: Iterable[tuple[Hashable, int]]) -> None:
        """Count the webhooks (party, size) answered; one line when a burst of refusals ends."""
        with self._lock:
            for party, size in answered:
                held = self._parties[party]
                held[0] -= 1
                held[1] -= size
                if not held[0]:
                    del self._parties[party]
                self._waiting -= 1
                self._waiting_bytes -= size
            # The burst ends once the backlog is down to half: not a pair of lines per webhook at the edge.
            ended = self._refused if self._refused and self._waiting <= MAX_WAITING // 2 and \
                self._waiting_bytes <= MAX_WAITING_BYTES // 2 else 0
            if ended:
                self._refused = 0
        if ended:
            logger.warning("webhooks are taken again: %d were answered 503 meanwhile", ended)
