"""PostgreSQL connections killed (`pg_terminate_backend`) while webhooks are stored and
turns run: `qorven serve`, `qorven worker` and `qorven beat` on PostgreSQL + Redis, their
connections (and only theirs: they connect under an application name of their own) cut
every few hundred milliseconds.

A webhook whose store fails is answered with an error and delivered again, as a platform
does; a task whose connection dies fails and runs again. Nothing half-stored, nothing
twice: every unique message stored once as an event and once as a message, answered once,
sent once, each session's seqs gap-free.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import httpx
import psycopg
import pytest
from django.db import connection

from channels_app.models import InboundEvent, OutboundDelivery
from channels_app.services import binding_create
from sessions_app.models import Message

from ..channels_app.conftest import pair
from ..channels_app.payloads import post_telegram, telegram_update
from ..fakes.model_server import reply
from ..processes import Processes, free_port, needs_postgres_and_redis, process_env, wait_for
from .layout import (
    answers, deliver, each_stored_answered_and_sent_once, layout_started, sender_update, senders_paired, server_env,
    telegram_bound,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.reliability, needs_postgres_and_redis]

APP_NAME = "qorven-reliability-kills"  # the spawned processes' connections, and no one else's


def sizes(config) -> tuple[int, int]:
    return (20, 20) if config.getoption("--stress") else (6, 8)


class Killer(threading.Thread):
    """Terminates the spawned processes' backends on the test database: every `every` s
    once started, or once at each `kill_now()`."""

    def __init__(self, every: float = 3600) -> None:
        super().__init__(daemon=True)
        db = connection.settings_dict
        self.name_of_db = db["NAME"]
        self.dsn = dict(dbname=db["NAME"], user=db["USER"], password=db.get("PASSWORD") or None,
                        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, autocommit=True)
        # Refusing connections to the test database is done from outside it.
        self.admin_dsn = {**self.dsn, "dbname": "postgres"}
        self.every = every
        self.killed = 0
        self.stopping = threading.Event()

    def _terminate(self, conn: psycopg.Connection) -> None:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = %s AND pid <> pg_backend_pid()",
            [self.name_of_db, APP_NAME],
        ).fetchall()
        self.killed += sum(1 for (ok,) in rows if ok)

    def run(self) -> None:
        with psycopg.connect(**self.dsn) as conn:
            while not self.stopping.wait(self.every):
                self._terminate(conn)

    def kill_now(self) -> None:
        with psycopg.connect(**self.admin_dsn) as conn:
            self._terminate(conn)

    def connections(self, allowed: bool) -> None:
        """The test database takes new connections, or refuses them (the superuser's too)."""
        with psycopg.connect(**self.admin_dsn) as conn:
            conn.execute(f'ALTER DATABASE "{self.name_of_db}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')

    def stop(self) -> None:
        """Stops it, and is a no-op when it never started (the processes it was for failed to
        start): it raised there, and the processes' own stop in the same `finally` never ran,
        leaving a server, a worker and a beat on the test database into the next run."""
        self.stopping.set()
        if self.is_alive():
            self.join(10)


async def _post_until_accepted(base: str, senders: int, per_sender: int) -> Counter[int]:
    """Each sender's messages in order; one that is not answered 200 is delivered again
    (after a short wait), as Telegram does, before the sender's next message."""
    statuses: Counter[int] = Counter()

    async def sender(client: httpx.AsyncClient, s: int) -> None:
        for n in range(1, per_sender + 1):
            await deliver(client, base, sender_update(s, n), statuses)
            await asyncio.sleep(0.05)

    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.gather(*(sender(client, s) for s in range(senders)))
    return statuses


def test_connections_killed_during_appends_and_turns_lose_nothing_and_double_nothing(
    request, world, model_server, platform
):
    senders, per_sender = sizes(request.config)
    unique = senders * per_sender
    model_server.default = reply("Got it.", delay=0.1)
    telegram_bound(world)
    senders_paired(world, senders)
    env = {**server_env(model_server, platform), "PGAPPNAME": APP_NAME, "QORVEN_SWEEP_INTERVAL": "3"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    processes = Processes()
    killer = Killer(every=0.4)
    try:
        server, worker = layout_started(processes, env, port, worker_slots=4, beat=True)
        killer.start()
        started = time.monotonic()
        try:
            statuses = asyncio.run(_post_until_accepted(base, senders, per_sender))
        except AssertionError as exc:  # what the server said while it refused
            raise AssertionError(f"{exc}\n{server.output[-6000:]}") from None
        time.sleep(max(0.0, 3 - (time.monotonic() - started)))  # turns meet the kills too
        killer.stop()

        assert wait_for(lambda: len(platform.sent("sendMessage")) >= unique, 90, processes=processes), (
            f"{len(platform.sent('sendMessage'))}/{unique} sent after {killer.killed} kills\n"
            f"{server.output[-2000:]}\n{worker.output[-4000:]}")
        settled_in = time.monotonic() - started
        time.sleep(3)  # a second send would come now
    finally:
        processes.stop()
        killer.stop()

    print(f"pg kills: {killer.killed} connections killed, statuses {dict(statuses)}, all sent in {settled_in:.1f} s")
    assert killer.killed > 0
    each_stored_answered_and_sent_once(platform, senders, per_sender)
    for s in range(senders):
        rows = list(Message.objects.filter(session__user__username=f"sender{s}").order_by("seq")
                    .values_list("seq", "role", "content"))
        assert [seq for seq, _, _ in rows] == list(range(1, len(rows) + 1))
        assert [c for _, role, c in rows if role == "user"] == [f"s{s} m{n}" for n in range(1, per_sender + 1)]


PARTS = [f"Part {i}: " + " ".join(f"word{i}x{w}" for w in range(380)) for i in (1, 2)]  # ~3,900 characters each


@pytest.mark.celery_worker
@pytest.mark.parametrize("away", [0.0, 2.5], ids=["killed", "away"])
def test_a_connection_killed_while_a_part_is_on_its_way_sends_it_once_and_tells_of_no_failure(
    client, world, processes, model_server, platform, away
):
    """A reply in two Telegram parts; the worker's database connections are terminated
    while Telegram takes the first (the request is out, the answer not yet back) — and,
    `away`, the database refuses new ones for a few seconds more. Telegram answered that
    it has the part: it is recorded sent — not taken for one cut off mid-send, not shown
    as "may not have reached you" — and the second part goes out after it, each once."""
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("\n\n".join(PARTS))
    killer = Killer()  # the kill is made once, from the platform below

    def kill_as_telegram_takes_it(recorded) -> None:
        if "sendMessage" in recorded.path and not killer.killed:
            if away:
                killer.connections(False)
                threading.Timer(away, killer.connections, [True]).start()
            killer.kill_now()

    platform.on_request = kill_as_telegram_takes_it
    env = process_env(model_server, PGAPPNAME=APP_NAME, QORVEN_SWEEP_INTERVAL="1")
    try:
        processes.purge(env)
        worker = processes.worker(env, concurrency=1)
        processes.start("beat", "--max-interval", "1", env=env)
        assert post_telegram(client, telegram_update("the long story")).status_code == 200
        assert wait_for(lambda: len(platform.sent("sendMessage")) >= 2, 30, processes=processes), (
            worker.output[-3000:])
        time.sleep(4)  # a sweep that took the first part for cut off, and its notice, would come now
    finally:
        if away:
            killer.connections(True)

    assert killer.killed > 0  # the scenario: the worker's connection went while Telegram had the part
    texts = [r.json["text"] for r in platform.sent("sendMessage")]
    assert [t.split(":")[0] for t in texts] == ["Part 1", "Part 2"], texts
    assert list(OutboundDelivery.objects.order_by("part").values_list("state", flat=True)) == ["sent", "sent"]
    assert not Message.objects.filter(metadata__notice="reply_undelivered").exists()
    assert Message.objects.get(role="user").answer_state == "answered"
    assert Message.objects.filter(role="assistant").count() == 1


def test_a_webhook_delivered_twice_at_once_while_the_database_is_away_is_stored_and_answered_once(
    world, model_server, platform
):
    """The database refuses connections for a few seconds (the server's are cut, no new
    one is let in) while Telegram delivers one update twice at once, and again each time
    it is not answered 200, as Telegram does. The update is stored once, answered once,
    sent once. (A webhook the server's storing thread takes while the database is away
    is refused 503, or waits for a pooled connection and is answered 200 once stored.)"""
    model_server.default = reply("Got it.")
    telegram_bound(world)
    pair(world, "telegram", "800000", world.alice)
    killer = Killer()
    env = {**server_env(model_server, platform), "PGAPPNAME": APP_NAME}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    processes = Processes()
    try:
        server, worker = layout_started(processes, env, port, worker_slots=2)
        killer.connections(False)
        killer.kill_now()
        threading.Timer(2.0, killer.connections, [True]).start()

        async def deliver_twice() -> Counter[int]:
            statuses: Counter[int] = Counter()
            async with httpx.AsyncClient(timeout=30) as client:
                update = sender_update(0, 1)
                await asyncio.gather(deliver(client, base, update, statuses, tries=60),
                                     deliver(client, base, update, statuses, tries=60))
            return statuses

        statuses = asyncio.run(deliver_twice())
        assert wait_for(lambda: platform.sent("sendMessage"), 30, processes=processes), (
            f"{statuses}\n{server.output[-3000:]}\n{worker.output[-3000:]}")
        time.sleep(3)  # a second answer would be sent now
    finally:
        killer.connections(True)
        processes.stop()

    print(f"twice while away: statuses {dict(statuses)}, {killer.killed} connections cut")
    assert killer.killed > 0  # the scenario: the server's connections were cut as the deliveries came
    assert statuses[200] == 2 and set(statuses) <= {200, 503, 0}  # refused (delivered again) or stored
    assert InboundEvent.objects.count() == 1
    assert Message.objects.filter(role="user").count() == 1
    assert Message.objects.filter(role="assistant").count() == 1
    assert [r.json["text"] for r in platform.sent("sendMessage")] == ["Got it."]


@pytest.mark.celery_worker
def test_a_connection_killed_while_the_model_writes_the_reply_answers_once(client, world, processes, model_server,
                                                                             platform):
    """The worker's database connections are terminated while the model writes a reply
    (the turn holds its session, the message is stored). The turn comes back on a fresh
    connection: the message is kept and answered once, and the reply sent once."""
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                   credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    pair(world, "telegram", "42", world.alice)
    killer = Killer()

    def answer_after_a_kill(body):
        if not killer.killed:
            killer.kill_now()
        return reply("Here it is.")

    model_server.default = answer_after_a_kill
    env = process_env(model_server, PGAPPNAME=APP_NAME, QORVEN_SWEEP_INTERVAL="1")
    processes.purge(env)
    worker = processes.worker(env, concurrency=1)
    processes.start("beat", "--max-interval", "1", env=env)
    assert post_telegram(client, telegram_update("hello")).status_code == 200
    assert wait_for(lambda: platform.sent("sendMessage"), 30, processes=processes), worker.output[-3000:]
    time.sleep(3)  # a second answer or send would come now

    assert killer.killed > 0
    assert [r.json["text"] for r in platform.sent("sendMessage")] == ["Here it is."]
    assert list(Message.objects.order_by("seq").values_list("role", "content")) == [
        ("user", "hello"), ("assistant", "Here it is.")]
    assert Message.objects.get(role="user").answer_state == "answered"


def test_a_server_and_a_beat_started_while_the_database_is_away_wait_for_it_and_run(world, model_server, platform):
    """`qorven serve` and `qorven beat` started while the database refuses connections (a
    host rebooting, PostgreSQL slower to come up than they are, a restart of all three):
    they wait for it, then serve and fire. Both ended at their first query with a
    traceback — the beat before its scheduler, which waits for the database, was ever
    reached — and stayed down; the worker, started the same way, went on."""
    killer = Killer()
    # Away longer than a pooled connection is waited for (QORVEN_DB_POOL_TIMEOUT), as a
    # database taking a while to come up is.
    env = {**server_env(model_server, platform), "PGAPPNAME": APP_NAME, "QORVEN_DB_POOL_TIMEOUT": "1"}
    port = free_port()
    processes = Processes()
    try:
        processes.purge(env)
        killer.connections(False)
        beat = processes.start("beat", "--max-interval", "1", env=env)
        server = processes.start("serve", "--port", str(port), env=env)
        # Both start and meet the database away. Let in only once each says so: a fixed 4 s
        # here let it in before a start slowed by a loaded host had asked (the beat's pool
        # warned, then had its connection within QORVEN_DB_POOL_TIMEOUT, and nothing waited).
        for process in (beat, server):
            process.wait_for_line("waiting for the database (PostgreSQL database", 60)
        time.sleep(1.5)  # away longer than a pooled connection is waited for
        killer.connections(True)
        assert wait_for(lambda: answers(f"http://127.0.0.1:{port}/readyz"), 60), server.output[-3000:]
        beat.wait_for_line("celery beat v", 30)  # its scheduler started
        time.sleep(2)
        assert beat.popen.poll() is None, beat.output[-3000:]
        assert server.popen.poll() is None, server.output[-3000:]
    finally:
        killer.connections(True)
        processes.stop()

    for output in (server.output, beat.output):
        assert "Traceback" not in output
        assert "waiting for the database (PostgreSQL database" in output
