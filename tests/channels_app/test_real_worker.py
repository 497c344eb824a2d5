"""The failure rules on the scale-out layout: `qorven worker` processes over Redis and
PostgreSQL (CI's second pass). A refused message fails alone, a transient failure comes
back after its delay, a platform's retry_after is waited out once, a delivery that keeps
failing ends failed, heartbeat retries run after their delays, and a worker killed in the
middle of three turns leaves every message answered exactly once."""
from __future__ import annotations

import json
import time

import pytest

from channels_app.models import Identity, OutboundDelivery
from channels_app.services import binding_create
from heartbeats_app.models import HeartbeatRun
from qorven.agent.tasks import heartbeat_run
from sessions_app.models import Message
from tenancy.services import api_token_create

from ..factories.heartbeats_app import beat
from ..fakes.model_server import Step, error, reply
from ..fakes.platform_server import Canned
from ..processes import needs_postgres_and_redis, process_env, wait_for
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker, needs_postgres_and_redis]

FAST = {"QORVEN_MODEL_RETRIES": "0", "QORVEN_ANSWER_RETRY_DELAY": "0.5", "QORVEN_SEND_BACKOFF": "0.2",
        "QORVEN_SEND_RETRIES": "2", "QORVEN_HEARTBEAT_RETRY_DELAY": "0.5"}


@pytest.fixture
def worker(processes, model_server, platform):
    env = process_env(model_server, **FAST)
    processes.purge(env)
    return processes.worker(env)


def ask(client, world, content):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201
    return response.json()["message"]


def assistant_replies(**filters):
    return list(Message.objects.filter(role="assistant", **filters).order_by("created_at"))


def test_on_a_worker_a_refused_message_fails_alone_and_the_next_is_answered(
    client, world, worker, processes, model_server
):
    model_server.add(error(400, "rejected by the content filter", code="content_filter"), reply("Sure."))
    first = ask(client, world, "the refused one")
    assert wait_for(lambda: Message.objects.filter(answer_state="failed").exists(), 30, processes=processes)
    ask(client, world, "an ordinary one")
    assert wait_for(lambda: assistant_replies(), 30, processes=processes)
    (answer,) = assistant_replies()
    assert answer.content == "Sure." and answer.metadata["reply_to"] == first["seq"] + 2  # after the notice
    (notice,) = Message.objects.filter(role="system")
    assert notice.metadata == {"notice": "model_refused", "reply_to": first["seq"]}
    assert "the refused one" not in json.dumps(model_server.requests[1]["messages"])


def test_on_a_worker_a_transient_failure_comes_back_after_its_delay(client, world, worker, processes, model_server):
    model_server.add(error(503), reply("Back now."))
    ask(client, world, "hello?")
    assert wait_for(lambda: assistant_replies(), 30, processes=processes)
    assert [m.content for m in assistant_replies()] == ["Back now."]
    first, second = model_server.arrivals
    assert second - first >= 0.5  # QORVEN_ANSWER_RETRY_DELAY, waited on the worker's timer
    question = Message.objects.get(role="user")
    assert (question.answer_state, question.answer_attempts) == ("answered", 1)


def test_on_a_worker_a_telegram_reply_waits_out_retry_after_and_is_sent_once(
    client, world, telegram, worker, processes, platform, model_server
):
    pair(world, "telegram", "42", world.alice)
    platform.script(r"sendMessage", Canned(status=429, body={
        "ok": False, "error_code": 429, "parameters": {"retry_after": 2}}))
    model_server.default = reply("Hello.")
    post_telegram(client, telegram_update("hi"))
    assert wait_for(lambda: OutboundDelivery.objects.filter(state="sent").exists(), 30, processes=processes)
    time.sleep(1.0)  # a second send would show up now
    sends = platform.sent("sendMessage")
    assert len(sends) == 2 and sends[1].at - sends[0].at >= 2.0


def test_on_a_worker_a_delivery_failing_with_500_ends_failed(client, world, telegram, worker, processes, platform,
                                                             model_server):
    pair(world, "telegram", "42", world.alice)
    platform.default(r"sendMessage", Canned(status=500, body={"ok": False}))
    model_server.default = reply("Hello.")
    post_telegram(client, telegram_update("hi"))
    # The reply gives up after three tries; our notice that it did not get there, after three more.
    assert wait_for(lambda: OutboundDelivery.objects.filter(state="failed").count() == 2, 60, processes=processes)
    delivery = OutboundDelivery.objects.get(message__role="assistant")
    assert delivery.attempts == 3 and "gave up after 3 attempts" in delivery.last_error
    assert [s.json["text"] for s in platform.sent("sendMessage")][:3] == ["Hello."] * 3
    assert len(platform.sent("sendMessage")) == 6


def test_on_a_worker_heartbeat_retries_run_after_their_delays(world, worker, processes, model_server):
    world.qor_a.heartbeat_model = "beat-model"
    world.qor_a.save()
    pills = beat(world.qor_a, name="pills", prompt="Pills?", owner=world.alice, deliver_to=world.alice,
                 deliver_channel="telegram")
    model_server.add(error(503), error(503), reply("Pills!"))
    heartbeat_run.delay(world.tenant_a.pk, pills.pk, tick="2026-11-30T08:00:00+00:00")
    assert wait_for(lambda: HeartbeatRun.objects.filter(status="ok").exists(), 30, processes=processes)
    assert HeartbeatRun.objects.get().attempts == 3
    first, second, third = model_server.arrivals
    assert second - first >= 0.5 and third - second >= 2.0


KILLED_LEASE = 5  # seconds: QORVEN_TURN_LEASE of the workers whose turns are killed


def test_a_worker_killed_in_the_middle_of_three_turns_leaves_each_message_answered_exactly_once(
    client, world, telegram, processes, platform, model_server
):
    """Two workers and a beat; the worker holding three turns is killed outright while the
    model is slow. Once the dead worker's leases run out (QORVEN_TURN_LEASE, 5 s here) a
    sweep (QORVEN_SWEEP_INTERVAL, 2 s here) gives the turns to the other worker, which
    answers every message, and no reply is sent twice. (With the defaults, 30 s and 15 s,
    the same takes up to 45 s more: it was waited out here on every run.)"""
    globex = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram",
                            credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "globex_bot"})
    pair(world, "telegram", "41", world.alice)
    pair(world, "telegram", "42", world.bob)
    Identity.objects.create(tenant=world.tenant_b, channel="telegram", external_id="43", user=world.charlie,
                            approval="approved", trust_level="owner", display_name="Charlie")
    calls = []

    def model(body):
        calls.append(body)
        asker = body["messages"][-1]["content"].split(":")[0]
        return Step(text=f"For {asker}", delay=25 if len(calls) <= 3 else 0)  # the doomed worker's calls hang

    model_server.default = model
    env = process_env(model_server, QORVEN_TURN_LEASE=str(KILLED_LEASE), QORVEN_SWEEP_INTERVAL="2")
    processes.purge(env)
    doomed = processes.worker(env, concurrency=3)
    processes.start("beat", "--max-interval", "1", env=env)
    for user_id, name, secret in ((41, "Ann", "tg-secret-a"), (42, "Ben", "tg-secret-a"), (43, "Cat", "tg-secret-b")):
        update = telegram_update(f"hello from {name}", user_id=user_id, first_name=name)
        assert post_telegram(client, update, secret=secret).status_code == 200
    assert wait_for(lambda: len(calls) == 3, 30, processes=processes)  # the doomed worker holds all three turns
    survivor = processes.worker(env)
    doomed.kill()
    killed_at = time.monotonic()

    assert wait_for(lambda: len(platform.sent("sendMessage")) >= 3, 60, processes=processes), (
        f"answered: {[m.content for m in assistant_replies()]}\n{survivor.output[-3000:]}"
    )
    assert time.monotonic() - killed_at < KILLED_LEASE + 20  # the lease, a sweep, three short turns
    time.sleep(3)  # a duplicate would show up now
    sent = sorted((s.path.split("/")[2], s.json["chat_id"], s.json["text"]) for s in platform.sent("sendMessage"))
    assert sent == [
        ("bot111:AAA", "41", "For [telegram] Ann"),
        ("bot111:AAA", "42", "For [telegram] Ben"),
        ("bot222:BBB", "43", "For [telegram] Cat"),
    ]
    for user_message in Message.objects.filter(role="user"):
        assert user_message.answer_state == "answered"
        assert Message.objects.filter(session=user_message.session, role="assistant",
                                      metadata__reply_to=user_message.seq).count() == 1
    assert globex.pk


def test_webhooks_stored_together_are_each_processed_once_by_the_worker(world, worker, processes, model_server,
                                                                        platform):
    """Concurrent webhooks share one INSERT and their tasks go to Redis in one batch; the
    worker answers each exactly once."""
    from .test_webhook_ingest import asgi_post, tg

    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    for i in range(5):
        pair(world, "telegram", str(500 + i), world.alice if i == 0 else world.bob)
    model_server.default = reply("ok")
    updates = [telegram_update(f"hello {i}", user_id=500 + i, message_id=600 + i) for i in range(5)]
    responses = asgi_post(*(tg(u) for u in updates), *(tg(u) for u in updates))
    assert [r.status_code for r in responses] == [200] * 10
    assert wait_for(lambda: len(platform.sent("sendMessage")) >= 5, 60, processes=processes)
    time.sleep(1)  # a second send would come now, if any were made
    assert len(platform.sent("sendMessage")) == 5
    assert Message.objects.filter(role="user").count() == 5


def test_a_workers_turns_and_model_calls_are_served_on_its_metrics_port(client, world, processes, model_server,
                                                                         platform):
    """The web server's /metrics cannot see what the worker's children counted: the worker
    serves the sum over its processes on its own port."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import urllib.error

    env = {**process_env(model_server, **FAST), "QORVEN_METRICS_TOKEN": "scrape-me"}
    processes.purge(env)
    proc = processes.start("worker", "--concurrency", "2", "--metrics-port", str(port), env=env)
    proc.wait_for_line(" ready.")
    model_server.add(reply("Counted."))
    ask(client, world, "count me")
    assert wait_for(lambda: assistant_replies(), 30, processes=processes)

    def scrape(token: str = "scrape-me") -> str:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.read().decode()

    # The web server's rule: with QORVEN_METRICS_TOKEN set, only its bearer reads them.
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape("not-the-token")
    assert refused.value.code == 401

    assert wait_for(lambda: 'qorven_turns_total{outcome="answered"} 1.0' in scrape(), 10)
    page = scrape()
    assert 'qorven_model_calls_total{outcome="ok",role="main"} 1.0' in page
    assert "qorven_model_call_seconds_count" in page


def test_each_worker_process_is_connected_and_ready_before_its_first_task(world, processes, model_server, platform):
    """A worker's children connect and run their prepared reads as they start
    (qorven.runtime.management.commands.worker._child_warm), not on their first task."""
    from django.db import connection

    def worker_connections() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'qorven worker'"
                           " AND datname = current_database()")
            return cursor.fetchone()[0]

    env = process_env(model_server, **FAST)
    processes.purge(env)
    assert worker_connections() == 0
    processes.worker(env, concurrency=3)
    # Nothing is asked of it; as it starts it runs one task (the sweep) in one of the three.
    assert wait_for(lambda: worker_connections() == 3, 20, processes=processes)


@pytest.fixture
def bots_of_two_tenants(world, telegram):
    """Alice on tenant A's bot (sender 41); Charlie on tenant B's bot (sender 43)."""
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram",
                   credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "globex_bot"})
    pair(world, "telegram", "41", world.alice)
    Identity.objects.create(tenant=world.tenant_b, channel="telegram", external_id="43", user=world.charlie,
                            approval="approved", trust_level="owner", display_name="Charlie")


def killed_mid_send(client, processes, platform, model_server):
    """A worker (one send slot) killed while Alice's reply hangs at tenant A's bot; another
    worker started on the same host."""
    model_server.default = reply("Answer.")
    platform.script(r"bot111:AAA/sendMessage", Canned(delay=15))
    env = process_env(model_server, **FAST, QORVEN_SWEEP_INTERVAL="2", QORVEN_PLATFORM_TIMEOUT="5")
    processes.purge(env)
    processes.start("beat", "--max-interval", "1", env=env)  # the sweeper's clock
    first = processes.worker(env, concurrency=2)  # QORVEN_SEND_SLOTS = 1
    assert post_telegram(client, telegram_update("from alice", user_id=41, first_name="Ann")).status_code == 200
    assert wait_for(lambda: len(platform.sent("sendMessage")) == 1, 30, processes=processes)
    first.kill()
    processes.worker(env, concurrency=2)


def test_a_restarted_worker_does_not_inherit_the_send_slot_of_the_one_killed_mid_send(
    client, world, bots_of_two_tenants, processes, platform, model_server
):
    """The new worker has the old one's host name, and the slots were named after it:
    tenant B's reply waited ~45 s for a send slot held by a dead process."""
    killed_mid_send(client, processes, platform, model_server)
    assert post_telegram(client, telegram_update("from charlie", user_id=43, first_name="Cat"),
                         secret="tg-secret-b").status_code == 200
    assert wait_for(lambda: any("bot222" in r.path for r in platform.sent("sendMessage")), 15, processes=processes)


def test_a_bot_whose_sender_was_killed_mid_send_sends_its_next_reply_soon(
    client, world, bots_of_two_tenants, processes, platform, model_server
):
    """The dead send held tenant A's bot, and the replies waiting for it were left to the
    sweeper's three-minute grace: Alice's next reply waited ~3 min."""
    killed_mid_send(client, processes, platform, model_server)
    assert post_telegram(client, telegram_update("and again", user_id=41, first_name="Ann",
                                                 message_id=2)).status_code == 200
    def answers() -> int:  # not counting our notice that the one cut off may not have got there
        return sum(r.json["text"] == "Answer." for r in platform.sent("bot111:AAA/sendMessage"))

    assert wait_for(lambda: answers() == 2, 75, processes=processes)


def test_the_rest_of_a_reply_whose_worker_was_killed_mid_send_goes_out_soon_with_one_notice(
    client, world, telegram, processes, platform, model_server
):
    """With the default QORVEN_PLATFORM_TIMEOUT (20 s) and sweep interval (15 s): the part
    whose worker was killed mid-send is failed (it may have reached Telegram: never sent
    again) as soon as a sweep finds its bot held by nobody, and the rest of the reply and
    one notice follow. The rest waited until the part was 70 s old."""
    from .test_undelivered_notice import NOTICE, OK, PARTS

    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("\n\n".join(PARTS))
    platform.default(r"sendMessage", OK)
    platform.script(r"sendMessage", OK, Canned(delay=60))  # the second part's send hangs
    env = process_env(model_server, **FAST)
    processes.purge(env)
    processes.start("beat", "--max-interval", "1", env=env)
    first = processes.worker(env, concurrency=2)
    assert post_telegram(client, telegram_update("tell me everything")).status_code == 200
    assert wait_for(lambda: len(platform.sent("sendMessage")) == 2, 30, processes=processes)
    first.kill()
    killed_at = time.monotonic()
    processes.worker(env, concurrency=2)

    def texts() -> list[str]:
        return [s.json["text"] for s in platform.sent("sendMessage")]

    assert wait_for(lambda: len(texts()) == 4, 60, processes=processes), texts()
    print(f"the rest of the reply and the notice sent {platform.sent('sendMessage')[-1].at - killed_at:.1f} s "
          "after the kill")
    assert time.monotonic() - killed_at < 25
    time.sleep(2)  # a second send of anything would show up now
    assert texts() == [PARTS[0], PARTS[1], PARTS[2], NOTICE]
    states = OutboundDelivery.objects.filter(message__role="assistant").order_by("part").values_list("state", flat=True)
    assert list(states) == ["sent", "failed", "sent"]


def test_a_worker_whose_redis_commands_are_bounded_below_its_fetchs_wait_still_takes_tasks_after_idling(
    client, world, processes, model_server, platform
):
    """QORVEN_REDIS_TIMEOUT bounds the broker's commands, but not the worker's blocking fetch
    (BRPOP, answered by Redis after 1 s when nothing is queued): a worker bounded well below
    that, idle for several fetches, takes each question at once and its log says nothing of
    a lost or stale broker connection."""
    env = process_env(model_server, **FAST, QORVEN_REDIS_TIMEOUT="0.3")
    processes.purge(env)
    worker = processes.worker(env)
    model_server.add(reply("First."), reply("Second."))
    for content in ("one", "two"):
        time.sleep(3)  # idle: three fetches come back empty
        asked = time.monotonic()
        ask(client, world, content)
        assert wait_for(lambda: len(assistant_replies()) == ("one", "two").index(content) + 1, 30,
                        processes=processes)
        assert time.monotonic() - asked < 10
    assert [m.content for m in assistant_replies()] == ["First.", "Second."]
    for sign in ("Connection to broker lost", "stale connection", "Timeout reading", "TimeoutError"):
        assert sign not in worker.output
