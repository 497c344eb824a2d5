"""Model faults on a real `qorven worker` (PostgreSQL + Redis): every way a model call can
go wrong, at once, each on a Telegram sender of its own. Whatever the fault, each message
gets exactly one reply or exactly one notice, stored once and sent once.

- 429 with Retry-After: the turn comes back after the wait the server asked for;
- 500 three times, then OK: retried with backoff (the message's tries, on the worker's
  timer), then answered;
- a hang past QORVEN_MODEL_TIMEOUT: the call is abandoned and the message tried again;
- malformed tool-call arguments, and a tool that does not exist: the model is told and
  answers on the next round;
- a context-length error: retried once with a smaller window and answered; twice in a
  row: one notice.
"""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from channels_app.services import binding_create
from sessions_app.models import Message

from ..channels_app.conftest import pair
from ..channels_app.payloads import post_telegram, telegram_update
from ..factories.tenancy import MembershipFactory, UserFactory
from ..fakes.model_server import Step, error, reply, tool_call
from ..processes import needs_postgres_and_redis, process_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker, pytest.mark.reliability,
              needs_postgres_and_redis]

TIMEOUT = 2.0  # QORVEN_MODEL_TIMEOUT of the worker
OVERFLOW = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."

# fault → what the model answers to that sender's message, call by call; then a reply.
FAULTS: dict[str, list[Step]] = {
    "rate": [error(429, "Rate limit reached", headers={"Retry-After": "1"})],
    "flaky": [error(500), error(502), error(503)],
    "hang": [reply("too late", delay=TIMEOUT + 2)],
    "badjson": [tool_call("memory_search", '{"query": "unterminated')],
    "unknown": [tool_call("no_such_tool", {"x": 1})],
    "overflow": [error(400, OVERFLOW, code="context_length_exceeded")],
    "overflow2": [error(400, OVERFLOW, code="context_length_exceeded")] * 2,
}
NOTICED = {"overflow2"}  # the faults that end in a notice rather than a reply


def test_every_model_fault_ends_in_one_reply_or_one_notice_sent_once(
    client, world, processes, model_server, platform
):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    senders = {}
    for i, fault in enumerate(FAULTS):
        person = UserFactory(username=f"model-{fault}", first_name=f"F{i}")
        MembershipFactory(tenant=world.tenant_a, user=person)
        pair(world, "telegram", str(700 + i), person)
        senders[fault] = 700 + i
    calls: Counter[str] = Counter()
    arrivals: dict[str, list[float]] = defaultdict(list)

    def model(body: dict[str, Any]) -> Step:
        asked = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
        fault = next(f for f in sorted(FAULTS, key=len, reverse=True) if f"fault {f}" in str(asked))
        n = calls[fault]
        calls[fault] += 1
        arrivals[fault].append(time.monotonic())
        script = FAULTS[fault]
        return script[n] if n < len(script) else reply(f"answer for {fault}")

    model_server.default = model
    env = process_env(model_server, QORVEN_MODEL_RETRIES="0", QORVEN_MODEL_TIMEOUT=str(TIMEOUT),
                      QORVEN_ANSWER_RETRY_DELAY="0.2", QORVEN_ANSWER_ATTEMPTS="4")
    processes.purge(env)
    processes.worker(env, concurrency=4)

    for fault, user_id in senders.items():
        update = telegram_update(f"fault {fault}", user_id=user_id, first_name=f"F{fault}", message_id=user_id)
        assert post_telegram(client, update).status_code == 200

    def settled() -> bool:
        return len(platform.sent("sendMessage")) >= len(FAULTS)

    assert wait_for(settled, 60, processes=processes), (
        f"sent: {[s.json['text'] for s in platform.sent('sendMessage')]}\n{processes.procs[0].output[-3000:]}")
    time.sleep(3)  # a duplicate, or a late retry, would arrive now

    sent = Counter((s.json["chat_id"], s.json["text"]) for s in platform.sent("sendMessage"))
    assert set(sent.values()) == {1}, sent
    assert {chat for chat, _ in sent} == {str(u) for u in senders.values()}
    for fault, user_id in senders.items():
        (question,) = Message.objects.filter(role="user", session__user__username=f"model-{fault}")
        answers = list(Message.objects.filter(session=question.session, role__in=["assistant", "system"],
                                              tool_calls__isnull=True, metadata__reply_to=question.seq))
        assert len(answers) == 1, (fault, [(a.role, a.content) for a in answers])
        (answer,) = answers
        if fault in NOTICED:
            assert (question.answer_state, answer.role) == ("failed", "system"), fault
            assert "8192" not in answer.content  # a notice of ours, not the provider's text
        else:
            assert (question.answer_state, answer.role, answer.content) == (
                "answered", "assistant", f"answer for {fault}"), fault
        assert sent[(str(user_id), answer.content)] == 1
    assert arrivals["rate"][1] - arrivals["rate"][0] >= 1.0  # Retry-After waited out
    assert calls["flaky"] == 4 and calls["hang"] == 2 and calls["overflow2"] == 2
    assert calls["badjson"] == calls["unknown"] == 2  # the tool's error fed back once, then the answer
