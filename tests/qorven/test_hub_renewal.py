"""The live hub's renewal of its group memberships (qorven.runtime.hub.Hub._renew) while
the layer's Redis is away: said once with its traceback, not once per renewal."""
from __future__ import annotations

import asyncio
import logging
import time

from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from qorven.runtime import hub as hub_module
from qorven.runtime.hub import Hub

from ..processes import redis_of_our_own, redis_start

RENEWALS_AWAY = 6  # renewals that fail before Redis comes back


class CountingLayer(RedisChannelLayer):
    """The lists layer (QORVEN_LIVE_LAYER=lists: the pub/sub layer's join of a group it is
    subscribed to already asks nothing of Redis), counting the joins the hub's renewal asks of it, and how they ended."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.renewals: list[bool] = []  # True: the join went through

    async def group_add(self, group: str, channel: str) -> None:
        task = asyncio.current_task()
        renewing = task is not None and task.get_name() == "qorven-hub-renew"
        try:
            await super().group_add(group, channel)
        except Exception:
            if renewing:
                self.renewals.append(False)
            raise
        if renewing:
            self.renewals.append(True)


class Page:
    async def hub_event(self, event, encoder) -> None:
        pass


async def _until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def test_renewals_failing_while_redis_is_away_log_one_traceback_and_one_line_once_they_work_again(
        monkeypatch, caplog):
    """Six renewals fail with the layer's Redis stopped, then one goes through once it is
    back: one warning with the traceback, and one line saying it works again. Before, each
    failed renewal logged a warning with a full traceback (six here; one an hour for as
    long as Redis is away, per server process)."""
    monkeypatch.setattr(hub_module, "RENEW_EVERY", 0.05)
    port, redis = redis_of_our_own()
    layer = CountingLayer(hosts=[{**settings.LIVE_REDIS_HOST, "address": f"redis://127.0.0.1:{port}/0"}])

    async def run() -> tuple[int, bool]:
        nonlocal redis
        live = Hub(layer)
        await live.join("chat.1", Page())
        assert await _until(lambda: True in layer.renewals)  # renewing, Redis there
        redis.terminate()
        redis.wait(10)
        away = await _until(lambda: layer.renewals.count(False) >= RENEWALS_AWAY)
        failed = layer.renewals.count(False)
        redis = await asyncio.to_thread(redis_start, port)
        back = await _until(lambda: layer.renewals[-1] is True)
        live._reader.cancel()
        live._renewer.cancel()
        await asyncio.gather(live._reader, live._renewer, return_exceptions=True)
        await layer.flush()
        return failed, away and back

    try:
        with caplog.at_level(logging.WARNING, logger="qorven.runtime.hub"):
            failed, happened = async_to_sync(run)()
    finally:
        redis.terminate()
        redis.wait(10)
    assert happened, layer.renewals
    assert failed >= RENEWALS_AWAY
    renewal = [(r.getMessage(), r.exc_info is not None) for r in caplog.records
               if r.name == "qorven.runtime.hub" and "renew" in r.getMessage()]
    assert len(renewal) == 2, caplog.text
    assert renewal[0][1], renewal  # the first failure, with its traceback
    assert "working again" in renewal[1][0] and not renewal[1][1], renewal
