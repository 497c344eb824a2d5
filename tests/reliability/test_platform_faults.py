"""Platform faults on a real `qorven worker` (PostgreSQL + Redis): a reply sent to a fake
Telegram that answers 429 with retry_after, fails with a 5xx, resets the connection after
reading the request, or hangs past QORVEN_PLATFORM_TIMEOUT.

A refusal the platform answered (429, 5xx) is retried — after the wait it asked for —
and the reply arrives once. A connection lost after the request went out is the
ambiguous case: the platform may have the message, so the part is never sent again; it
ends failed, shown as "not delivered" (a reply is never sent twice).
"""
from __future__ import annotations

import time

import pytest

from channels_app.models import OutboundDelivery
from channels_app.services import binding_create
from sessions_app.models import Message

from ..channels_app.conftest import pair
from ..channels_app.payloads import post_telegram, telegram_update
from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from ..processes import needs_postgres_and_redis, process_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker, pytest.mark.reliability,
              needs_postgres_and_redis]

TIMEOUT = 2.0  # QORVEN_PLATFORM_TIMEOUT of the worker

FAULTS: dict[str, Canned] = {
    "rate": Canned(status=429, body={"ok": False, "error_code": 429, "description": "Too Many Requests",
                                     "parameters": {"retry_after": 2}}),
    "down": Canned(status=502, body={"ok": False, "error_code": 502, "description": "Bad Gateway"}),
    "reset": Canned(reset=True),
    "hang": Canned(delay=TIMEOUT + 1.5),
}


def test_platform_faults_never_send_a_reply_twice(client, world, processes, model_server, platform):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    pair(world, "telegram", "42", world.alice)
    model_server.default = lambda body: reply("re: " + body["messages"][-1]["content"].split(": ", 1)[1])
    env = process_env(model_server, QORVEN_PLATFORM_TIMEOUT=str(TIMEOUT), QORVEN_SEND_BACKOFF="0.2",
                      QORVEN_SEND_RETRIES="2", QORVEN_MODEL_RETRIES="0")
    processes.purge(env)
    processes.worker(env)

    for n, (fault, canned) in enumerate(FAULTS.items(), start=1):
        platform.script(r"sendMessage", canned)
        assert post_telegram(client, telegram_update(f"fault {fault}", message_id=n)).status_code == 200

        def settled() -> bool:
            row = OutboundDelivery.objects.filter(text=f"re: fault {fault}", state__in=["sent", "failed"]).first()
            if row is None or row.state == "sent":
                return row is not None
            # Failed: its notice goes out before the next fault is scripted (it would take that fault).
            notice = Message.objects.filter(metadata__notice="reply_undelivered",
                                            metadata__undelivered=row.message_id).first()
            return notice is not None and OutboundDelivery.objects.filter(
                message_id=notice.pk, state__in=["sent", "failed"]).exists()

        assert wait_for(settled, 30, processes=processes), (fault, processes.procs[0].output[-3000:])
    # A second send of any of them (a retry of an ambiguous one) would have come by now: each
    # reply's sends are told apart by their text, so one wait after the last does for all.
    time.sleep(TIMEOUT + 1)
    outcome: dict[str, tuple[str, list[float]]] = {
        fault: (OutboundDelivery.objects.get(text=f"re: fault {fault}").state,
                [r.at for r in platform.sent("sendMessage") if r.json["text"] == f"re: fault {fault}"])
        for fault in FAULTS}
    # Our notices that a reply may not have got there, each naming the reply it is about.
    notices = Message.objects.filter(metadata__notice="reply_undelivered")
    told = {fault: notices.filter(metadata__undelivered=OutboundDelivery.objects.get(text=f"re: fault {fault}").message_id)
            .count() for fault in FAULTS}
    notice_sends = [r for r in platform.sent("sendMessage") if r.json["text"].startswith("My last reply may not")]
    assert len(notice_sends) == sum(told.values())  # each tried once

    rate_state, rate_sends = outcome["rate"]
    assert rate_state == "sent" and len(rate_sends) == 2 and rate_sends[1] - rate_sends[0] >= 2.0
    assert outcome["down"][0] == "sent" and len(outcome["down"][1]) == 2
    assert told["rate"] == told["down"] == 0
    for fault in ("reset", "hang"):
        state, sends = outcome[fault]
        assert (state, len(sends)) == ("failed", 1), (fault, outcome[fault])
        assert told[fault] == 1  # once, and the person is told it may not have got there
        row = OutboundDelivery.objects.get(text=f"re: fault {fault}")
        assert "may or may not have been delivered" in row.last_error
