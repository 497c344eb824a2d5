"""A live socket lives only as long as the sign-in that opened it (channels_app.live_auth
says when that has ended). Apart from the socket's events so that what follows the
sign-in reads as one piece: the socket's catch-up and fan-out never need to know it."""
from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from ..chat import ChatOwner
from ..live_auth import RECHECK_DELAY, RECHECK_EVERY, session_fingerprint

# The name the live sockets have always logged under.
logger = logging.getLogger("channels_app.consumers")

CLOSE_SIGNED_OUT = 4401


class SignInFollowingConsumer(AsyncJsonWebsocketConsumer):
    """A socket that closes (`signed_out`, then 4401) when the sign-in behind it ends.
    The live chat socket (live_chat.LiveChatConsumer) sets `owner`, `checked_at` and
    `rechecks` as it connects; subclasses say whose sign-in it is."""

    owner: ChatOwner | None
    checked_at: float
    rechecks: set[asyncio.Task[None]]

    follows_sign_in = False  # whether the socket closes when the sign-in that opened it ends
    session_key_at_open: str | None = None

    def signed_in(self) -> bool:
        """Whether the credentials that opened the socket still hold (sync, reads the database)."""
        return True

    def more_auth_groups(self, owner: ChatOwner) -> tuple[str, ...]:
        """Groups besides the user's own whose `auth.changed` makes this socket check again."""
        return ()

    async def auth_changed(self, event: dict[str, Any]) -> None:
        if event.get("ended") and event["ended"] == session_fingerprint(self.session_key_at_open):
            await self.sign_out()
            return
        # Checked a moment later, off this socket's event loop turn: live events keep flowing meanwhile.
        task = asyncio.get_running_loop().create_task(self._recheck_after(RECHECK_DELAY))
        self.rechecks.add(task)
        task.add_done_callback(self.rechecks.discard)

    async def _recheck_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        await self.recheck()

    def recheck_every_while_open(self) -> None:
        """Check again every RECHECK_EVERY or sooner (from half of it: each socket has its
        own period) for as long as the socket is open: a session or a
        token can just expire, which no event tells, and a client need not ping (one that
        never does would otherwise follow the chat for as long as it stayed connected)."""
        task = asyncio.get_running_loop().create_task(self._recheck_periodically())
        self.rechecks.add(task)
        task.add_done_callback(self.rechecks.discard)

    async def _recheck_periodically(self) -> None:
        # This socket's own period, in the second half of RECHECK_EVERY: sockets opened
        # together (every client reconnecting after a restart) would otherwise read the
        # database together, every period, for as long as they stay open.
        every = RECHECK_EVERY * random.uniform(0.5, 1.0)
        while self.owner is not None:
            # Due from the last check, whatever made it (a change, a ping); a second at least.
            await asyncio.sleep(max(1.0, self.checked_at + every - time.monotonic()))
            if self.owner is not None and time.monotonic() - self.checked_at >= every:
                await self.recheck()

    async def recheck_when_due(self) -> None:
        """On a client's ping: a session can also just expire, which no event tells."""
        if self.follows_sign_in and time.monotonic() - self.checked_at > RECHECK_EVERY:
            await self.recheck()

    async def recheck(self) -> None:
        self.checked_at = time.monotonic()
        try:
            still = await database_sync_to_async(self.signed_in)()
        except Exception:
            logger.exception("could not check a live socket's sign-in")
            return  # checked again on the next change or ping
        if not still:
            await self.sign_out()

    async def sign_out(self) -> None:
        if self.owner is None:
            return
        self.owner = None
        await self.send_json({"type": "signed_out"})
        await self.close(code=CLOSE_SIGNED_OUT)
