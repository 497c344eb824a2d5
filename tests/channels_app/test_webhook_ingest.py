"""Webhooks as `qorven serve` receives them: through the ASGI application, answered by
channels_app.webhook_ingest without Django's request cycle, stored in batches."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from channels_app.models import InboundEvent
from channels_app.services import binding_create
from channels_app.webhook_ingest import _Job, group_commit
from sessions_app.models import Message
from tenancy.models import PluginSetting

from ..conftest import broker_use
from ..fakes.model_server import reply
from .conftest import pair
from .payloads import telegram_scope, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


def asgi_post(*requests: tuple[str, bytes, dict[str, str]], host: str = "testserver") -> list[httpx.Response]:
    """POST each (path, body, headers) to the ASGI application, all at once."""
    from qorven.asgi import application

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as client:
            return await asyncio.gather(*(client.post(path, content=body, headers=headers)
                                          for path, body, headers in requests))

    return asyncio.run(run())


def tg(update: dict, secret: str = "tg-secret-a") -> tuple[str, bytes, dict[str, str]]:
    return ("/v1/webhooks/telegram", json.dumps(update).encode(),
            {"content-type": "application/json", "x-telegram-bot-api-secret-token": secret})


def test_a_webhook_through_the_server_is_stored_answered_and_replied_to(world, telegram, platform, model_server,
                                                                        drain):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Hello from the server path."))
    (response,) = asgi_post(tg(telegram_update("hi there", message_id=11)))
    assert response.status_code == 200 and response.json() == {"ok": True}
    assert InboundEvent.objects.get().external_id.endswith("11")
    drain()
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json["text"] == "Hello from the server path."
    assert list(Message.objects.order_by("seq").values_list("role", "content")) == [
        ("user", "hi there"), ("assistant", "Hello from the server path.")]


def test_concurrent_webhooks_and_repeats_are_each_stored_once_in_arrival_order(world, telegram, platform,
                                                                               model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("ok")
    updates = [telegram_update(f"message {i}", message_id=100 + i) for i in range(12)]
    # Each update twice, the repeat right behind the original: a platform's retry racing it.
    responses = asgi_post(*(tg(u) for u in updates for _ in range(2)))
    assert [r.status_code for r in responses] == [200] * 24
    events = list(InboundEvent.objects.order_by("pk").values_list("external_id", flat=True))
    assert len(events) == 12 and len(set(events)) == 12
    drain()
    users = list(Message.objects.filter(role="user").order_by("seq").values_list("content", flat=True))
    assert users == [f"message {i}" for i in range(12)]
    assert len(platform.sent("sendMessage")) == Message.objects.filter(role="assistant").count()


def test_webhooks_waiting_together_are_stored_with_one_statement_in_one_round_trip(world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("ok")
    from qorven.asgi import application  # noqa: F401 (Django set up as the server has it)

    loop = asyncio.new_event_loop()
    jobs = [_Job("telegram", telegram_scope(), json.dumps(telegram_update(f"m{i}", message_id=200 + i)).encode(), loop,
                 loop.create_future()) for i in range(8)]
    ran = []

    def noted(execute, sql, params, many, context):
        ran.append((sql.split()[0].upper(), connection.get_autocommit()))
        return execute(sql, params, many, context)

    with CaptureQueriesContext(connection) as captured, connection.execute_wrapper(noted):
        answers = group_commit.handle(jobs)
    assert [a.status for a in answers] == [200] * 8
    inserts = [q["sql"] for q in captured.captured_queries if q["sql"].upper().startswith("INSERT")]
    assert len(inserts) == 1
    # A transaction of its own: no BEGIN and COMMIT round trips around it (the reads
    # before it are of the binding and the channel switch, cached after the first).
    assert [r for r in ran if r[0] != "SELECT"] == [("INSERT", True)]
    assert InboundEvent.objects.count() == 8
    drain()
    loop.close()


def test_a_batch_is_stored_as_given_each_platform_id_once_and_each_row_with_its_own_tenant(
    world, telegram, platform, drain
):
    """inbound_store's one statement: rows of two tenants' bots in one batch, a repeat
    within it and one stored before are skipped (None), ids follow the order given, and
    each payload comes back as it went in."""
    from channels_app.inbound import InboundMessage
    from channels_app.receive import inbound_store

    other = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram",
                           credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "b_bot"})

    def msg(n: int, text: str) -> InboundMessage:
        return InboundMessage(channel="telegram", external_id=f"tg:{n}", sender_id=f"9{n}", sender_name="Zoë",
                              text=text, reply_target=f"9{n}", extra={"nested": {"list": [1, "two", None]}})

    with transaction.atomic():  # read before the commit lets the worker at it (a processed event keeps no text)
        (before,) = inbound_store(items=[(telegram, msg(1, "first"))])
        assert InboundEvent.objects.get(pk=before).payload["text"] == "first"
    texts = ['quotes " and \\ back', "emoji 😀 and ünïcode", "first, again", "to the other bot", "plain"]
    items = [(telegram, msg(2, texts[0])), (telegram, msg(3, texts[1])), (telegram, msg(1, texts[2])),
             (other, msg(2, texts[3])), (telegram, msg(2, "a repeat in the batch")), (telegram, msg(4, texts[4]))]
    with transaction.atomic():  # read before the commit lets the worker at them: all still pending
        ids = inbound_store(items=items)
        kept = [pk for pk in ids if pk is not None]
        rows = list(InboundEvent.objects.filter(pk__in=kept).order_by("pk").values_list(
            "tenant_id", "binding_id", "external_id", "state", "payload"))
    assert [pk is None for pk in ids] == [False, False, True, False, True, False]
    assert kept == sorted(kept) and kept[0] > before
    assert [(t, b, x, s) for t, b, x, s, _ in rows] == [
        (world.tenant_a.pk, telegram.pk, "tg:2", "pending"), (world.tenant_a.pk, telegram.pk, "tg:3", "pending"),
        (world.tenant_b.pk, other.pk, "tg:2", "pending"), (world.tenant_a.pk, telegram.pk, "tg:4", "pending")]
    assert [p["text"] for *_, p in rows] == [texts[0], texts[1], texts[3], texts[4]]
    assert all(p["extra"] == {"nested": {"list": [1, "two", None]}} and p["sender_name"] == "Zoë" for *_, p in rows)
    drain()


def test_a_burst_stored_together_costs_the_server_one_publish_and_each_message_is_answered_once(
    world, telegram, platform, model_server, drain
):
    """The web process queues a burst's events with one task that queues each of them from
    a worker (a publish is much of what a webhook costs the server); a few at a time are
    queued directly, one hop from their turn."""
    import threading

    from celery.signals import before_task_publish

    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("ok")
    from qorven.asgi import application  # noqa: F401 (Django set up as the server has it)

    here, published = threading.get_ident(), []

    def seen(sender=None, **kwargs):
        if threading.get_ident() == here:
            published.append(sender)

    before_task_publish.connect(seen, weak=False)
    loop = asyncio.new_event_loop()
    try:
        burst = [_Job("telegram", telegram_scope(), json.dumps(telegram_update(f"m{i}", message_id=300 + i)).encode(),
                      loop, loop.create_future()) for i in range(8)]
        assert [a.status for a in group_commit.handle(burst)] == [200] * 8
        assert published == ["channels_app.inbound_fan_out"]
        drain()
        few = [_Job("telegram", telegram_scope(), json.dumps(telegram_update(f"n{i}", message_id=400 + i)).encode(),
                    loop, loop.create_future()) for i in range(2)]
        published.clear()
        assert [a.status for a in group_commit.handle(few)] == [200] * 2
        assert published == ["channels_app.inbound", "channels_app.inbound"]
        drain()
    finally:
        before_task_publish.disconnect(seen)
        loop.close()
    users = list(Message.objects.filter(role="user").order_by("seq").values_list("content", flat=True))
    assert users == [f"m{i}" for i in range(8)] + ["n0", "n1"]
    assert Message.objects.filter(role="assistant").count() == len(platform.sent("sendMessage")) >= 1
    assert set(InboundEvent.objects.values_list("state", flat=True)) == {"done"}


def test_a_broker_that_does_not_answer_holds_up_no_webhook_answer(world, telegram, settings):
    """The storing thread answers once the messages are stored and leaves the queuing of
    their processing to a thread of its own: a broker that stalls costs the platforms no
    wait (they would deliver again, and in the end give up on the bot). What it could not
    queue stays stored, pending, for the sweeper."""
    pair(world, "telegram", "42", world.alice)
    silent = socket.socket()  # takes connections (the kernel does) and never says a word
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    broker_use(settings, f"redis://127.0.0.1:{silent.getsockname()[1]}/0")
    answers: list[httpx.Response] = []
    posting = threading.Thread(target=lambda: answers.extend(
        asgi_post(*(tg(telegram_update(f"m{i}", message_id=500 + i)) for i in range(5)))))
    try:
        posting.start()
        posting.join(10)
        assert not posting.is_alive(), "the webhooks were not answered while the broker stalled"
        assert [r.status_code for r in answers] == [200] * 5
        assert InboundEvent.objects.filter(state="pending").count() == 5
    finally:
        silent.close()  # the stalled publish fails (logged) and the thread goes on
        posting.join(30)
        assert group_commit.flush(30)


def test_what_a_broker_that_was_away_refused_is_queued_once_it_is_back(world, telegram, settings, platform,
                                                                        model_server, drain):
    """A webhook stored while the broker refused connections was left to the sweeper's
    grace: answered half a minute after the broker came back. Its publish is tried again
    every second instead."""
    from ..conftest import EMBEDDED_BROKER
    from ..ports import free_port

    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Back.")
    broker_use(settings, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    (answer,) = asgi_post(tg(telegram_update("while it was away", message_id=700)))
    assert answer.status_code == 200
    assert group_commit.flush(30)  # tried once, and refused
    assert InboundEvent.objects.get().state == "pending"
    broker_use(settings, EMBEDDED_BROKER)  # back
    deadline = time.monotonic() + 10
    while not platform.sent("sendMessage") and time.monotonic() < deadline:
        time.sleep(0.1)
    drain()
    assert [r.json["text"] for r in platform.sent("sendMessage")] == ["Back."]


def test_one_webhook_that_cannot_be_stored_fails_alone(world, telegram, platform, model_server, drain):
    """A binding deleted by another server while this one still has it cached: its
    webhook cannot be stored (503, the platform delivers it again); the others are."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("ok")
    doomed = binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                            credentials={"token": "222:BBB", "secret": "tg-secret-gone", "username": "gone_bot"})
    asgi_post(tg(telegram_update("warm the cache", user_id=9, message_id=1), secret="tg-secret-gone"))
    drain()
    with connection.cursor() as cursor:  # as another process would: this one's cache does not see it
        cursor.execute("DELETE FROM channels_app_inboundevent WHERE binding_id = %s", [doomed.pk])
        cursor.execute("DELETE FROM channels_app_channelbinding WHERE id = %s", [doomed.pk])
    from qorven.asgi import application  # noqa: F401

    loop = asyncio.new_event_loop()
    bodies = [(telegram_update("kept", message_id=301), "tg-secret-a"),
              (telegram_update("lost binding", user_id=9, message_id=302), "tg-secret-gone"),
              (telegram_update("kept too", message_id=303), "tg-secret-a")]
    jobs = [_Job("telegram", telegram_scope(secret), json.dumps(body).encode(), loop, loop.create_future())
            for body, secret in bodies]
    answers = group_commit.handle(jobs)
    assert [a.status for a in answers] == [200, 503, 200]
    # (By their ids: a stored event may be processed already, and then it keeps no text.)
    stored = sorted(external_id.rpartition(":")[2] for external_id in InboundEvent.objects.values_list("external_id", flat=True))
    assert stored == ["301", "303"]
    drain()
    loop.close()


def test_refusals_store_nothing(world, telegram, settings):
    settings.QORVEN_MAX_BODY = 2000
    big = telegram_update("x" * 3000)
    responses = asgi_post(tg(telegram_update("bad secret"), secret="nope"), tg(big))
    assert [r.status_code for r in responses] == [403, 413]
    (bad_host,) = asgi_post(tg(telegram_update("hi")), host="evil.example")
    assert bad_host.status_code == 400
    PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="telegram", enabled=False)
    (switched_off,) = asgi_post(tg(telegram_update("hi")))
    assert switched_off.status_code == 404
    assert not InboundEvent.objects.exists()


def test_other_requests_still_reach_django(world, whatsapp):
    from qorven.asgi import application

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.get("/v1/webhooks/whatsapp", params={
                "hub.mode": "subscribe", "hub.verify_token": "wa-verify", "hub.challenge": "1234"})

    response = asyncio.run(run())
    assert response.status_code == 200 and response.text == "1234"


def test_a_challenge_and_a_form_encoded_webhook_are_answered_as_through_django(world, settings, platform,
                                                                              model_server, drain):
    """Slack's url_verification is answered with its challenge (the adapter's own response),
    and Twilio's form-encoded SMS webhook is verified against its full URL and stored."""
    import time
    from urllib.parse import urlencode

    from channels_app.adapters.base import hmac_hex
    from channels_app.adapters.sms import twilio_signature

    settings.QORVEN_PUBLIC_URL = "https://qorven.example"
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="slack", credentials={
        "app_id": "A0APP", "bot_token": "xoxb-1", "signing_secret": "slack-signing", "bot_user_id": "UBOT"})
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="sms",
                   credentials={"number": "+15550001111", "account_sid": "AC123", "auth_token": "twilio-token"})
    pair(world, "sms", "+15550002222", world.alice)
    model_server.default = reply("Got it.")
    challenge = json.dumps({"token": "x", "challenge": "c-123", "type": "url_verification"}).encode()
    stamp = str(int(time.time()))
    params = {"To": "+15550001111", "From": "+15550002222", "Body": "hi by sms", "MessageSid": "SM1"}
    slack_answer, sms_answer = asgi_post(
        ("/v1/webhooks/slack", challenge, {
            "content-type": "application/json", "x-slack-request-timestamp": stamp,
            "x-slack-signature": "v0=" + hmac_hex("slack-signing", b"v0:" + stamp.encode() + b":" + challenge)}),
        ("/v1/webhooks/sms", urlencode(params).encode(), {
            "content-type": "application/x-www-form-urlencoded",
            "x-twilio-signature": twilio_signature("twilio-token", "https://qorven.example/v1/webhooks/sms", params)}),
    )
    assert slack_answer.status_code == 200 and slack_answer.json() == {"challenge": "c-123"}
    assert sms_answer.status_code == 200
    assert InboundEvent.objects.get().external_id == "SM1"
    drain()  # (a processed event keeps no text: the conversation has it)
    assert list(Message.objects.filter(role="user").values_list("content", flat=True)) == ["hi by sms"]


def posting(*requests: tuple[str, bytes, dict[str, str]]) -> tuple[threading.Thread, list[httpx.Response]]:
    """asgi_post on a thread of its own, started: (the thread, the answers once it ends)."""
    answers: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answers.extend(asgi_post(*requests)))
    thread.start()
    return thread, answers


@pytest.fixture
def storing_held(monkeypatch):
    """The storing thread held at its INSERT (a database that does not answer) until set."""
    from channels_app import webhook_ingest

    release, store = threading.Event(), webhook_ingest.inbound_store

    def held(**kwargs):
        release.wait(30)
        return store(**kwargs)

    monkeypatch.setattr(webhook_ingest, "inbound_store", held)
    yield release
    release.set()


def waiting_reaches(count: int) -> None:
    deadline = time.monotonic() + 10
    while group_commit.waiting()[0] < count:
        assert time.monotonic() < deadline, f"{group_commit.waiting()} waiting, not {count}"
        time.sleep(0.01)


def test_past_the_webhooks_waiting_to_be_stored_more_are_answered_503_at_once_and_nothing_is_lost(
    world, telegram, platform, model_server, drain, storing_held, monkeypatch
):
    """A database that is slow or away (or a flood faster than it) no longer piles the
    waiting bodies up in the server's memory without bound: past MAX_WAITING webhooks
    waiting to be stored, more are refused with a 503 and Retry-After at once (the
    platforms deliver them again), with one warning for the burst; every one taken is
    stored once the database answers."""
    import logging

    from channels_app import webhook_bound
    from qorven.asgi import application  # noqa: F401 (Django set up as the server has it, its logging too)

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record)

    logged: list[logging.LogRecord] = []
    kept = Kept(logging.WARNING)
    logging.getLogger("channels_app.webhook_ingest").addHandler(kept)
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("ok")
    monkeypatch.setattr(webhook_bound, "MAX_WAITING", 5)
    taken, taken_answers = posting(*(tg(telegram_update(f"taken {i}", message_id=800 + i)) for i in range(5)))
    try:
        waiting_reaches(5)
        refused, refused_answers = posting(*(tg(telegram_update(f"refused {i}", message_id=900 + i))
                                             for i in range(4)))
        refused.join(10)
        assert not refused.is_alive(), "the webhooks past the limit waited with the others"
        assert [r.status_code for r in refused_answers] == [503] * 4
        assert all(1 <= int(r.headers["retry-after"]) <= 60 and "error" in r.json() for r in refused_answers)
        assert [r.getMessage().split(":")[0] for r in logged] == [
            "webhooks are answered 503 (the platforms deliver them again)"]  # once for the burst
    finally:
        storing_held.set()
        taken.join(30)
        logging.getLogger("channels_app.webhook_ingest").removeHandler(kept)
    assert [r.status_code for r in taken_answers] == [200] * 5
    stored = sorted(InboundEvent.objects.values_list("external_id", flat=True))
    assert [x.rpartition(":")[2] for x in stored] == [str(800 + i) for i in range(5)]
    waiting_reaches(0)
    assert group_commit.waiting() == (0, 0)
    (again,) = asgi_post(tg(telegram_update("after the burst", message_id=999)))
    assert again.status_code == 200
    assert [r.getMessage() for r in logged][1:] == ["webhooks are taken again: 4 were answered 503 meanwhile"]
    drain()
    assert InboundEvent.objects.count() == 6


def test_past_the_bytes_waiting_to_be_stored_a_webhook_that_does_not_fit_is_answered_503_one_that_fits_is_taken(
    world, telegram, platform, model_server, drain, storing_held, monkeypatch
):
    from channels_app import webhook_bound

    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("ok")
    first = tg(telegram_update("a long one " + "x" * 4000, message_id=1001))
    monkeypatch.setattr(webhook_bound, "MAX_WAITING_BYTES", len(first[1]) + 1000)
    taken, taken_answers = posting(first)
    try:
        waiting_reaches(1)
        refused, refused_answers = posting(tg(telegram_update("y" * 2000, message_id=1002)))
        refused.join(10)
        assert not refused.is_alive(), "the webhook past the limit waited with the others"
        small, small_answers = posting(tg(telegram_update("short", message_id=1003)))  # fits beside it
        assert [r.status_code for r in refused_answers] == [503]
    finally:
        storing_held.set()
        taken.join(30)
        small.join(30)
    assert [r.status_code for r in taken_answers + small_answers] == [200, 200]
    drain()
    assert sorted(x.rpartition(":")[2] for x in InboundEvent.objects.values_list("external_id", flat=True)) == [
        "1001", "1003"]
