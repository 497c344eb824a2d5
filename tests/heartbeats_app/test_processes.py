"""Where beats fire: in process on the embedded default (`qorven serve`), in `qorven beat`
with a broker. Both sync the defaults file on startup."""
from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from heartbeats_app.cron import cron_parse, tick_previous
from heartbeats_app.models import HeartbeatRun
from heartbeats_app.scheduler import EmbeddedBeat
from sessions_app.models import Message

from ..factories.heartbeats_app import beat
from ..fakes.model_server import reply
from ..processes import Processes, free_port

HANG = 120.0  # seconds a wait here may last: what only a hang reaches, not a loaded machine
SERVE_HANG = 300.0  # the same for `qorven serve` to start, which migrates a fresh file first


def wait_for(predicate, timeout=HANG):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.django_db(transaction=True)
def test_the_embedded_beat_fires_a_due_heartbeat_once_even_with_two_schedulers(world, model_server, drain):
    # Hourly at minute 0 of January the 1st: long overdue, and not due again for months.
    hb = beat(world.qor_a, name="new-year", cron="0 * 1 1 *", prompt="Wish a happy new year",
              deliver_to=world.alice, deliver_channel="telegram")
    PeriodicTask.objects.filter(pk=hb.periodic_task_id).update(last_run_at=timezone.now() - timedelta(days=400))
    model_server.default = reply("Happy new year!")

    schedulers = [EmbeddedBeat(max_interval=0.5), EmbeddedBeat(max_interval=0.5)]
    for s in schedulers:
        s.start()
    try:
        assert wait_for(lambda: HeartbeatRun.objects.filter(status="ok").exists())
        time.sleep(1.5)  # a second run would show up now
        drain()
    finally:
        for s in schedulers:
            s.stop()
    (run,) = HeartbeatRun.objects.all()
    expected = tick_previous(cron_parse("0 * 1 1 *").schedule(), timezone.get_default_timezone(), timezone.now())
    assert run.tick == expected
    assert len(model_server.requests) == 1
    (delivered,) = Message.objects.filter(session__kind="canonical", session__user=world.alice)
    assert (delivered.channel, delivered.content) == ("telegram", "Happy new year!")
    assert not PeriodicTask.objects.filter(task="celery.backend_cleanup").exists()


@pytest.mark.django_db(transaction=True)
def test_the_embedded_beat_stops_first_when_serve_shuts_down(world, model_server, drain):
    """After "Finishing the tasks running…" the embedded beat went on sending due beats:
    nothing stopped it."""
    import io
    import threading

    from qorven.runtime.startup import Startup, shutdown_run, startup_run

    started = Startup("serve", io.StringIO(), io.StringIO(), embedded=True, options={})
    startup_run(started, after_worker=True)
    (beat_thread,) = [t for t in threading.enumerate() if t.name == "qorven-beat"]
    shutdown_run(started)
    assert not beat_thread.is_alive()

    hb = beat(world.qor_a, name="new-year", cron="0 * 1 1 *", prompt="Wish a happy new year")
    PeriodicTask.objects.filter(pk=hb.periodic_task_id).update(last_run_at=timezone.now() - timedelta(days=400))
    model_server.default = reply("Happy new year!")
    time.sleep(1.0)
    drain()
    assert not HeartbeatRun.objects.exists() and model_server.requests == []


@pytest.mark.django_db
def test_beat_and_worker_need_a_broker():
    # The tests run on the embedded broker, as a machine with nothing configured does.
    with pytest.raises(CommandError, match="REDIS_URL"):
        call_command("beat")
    with pytest.raises(CommandError, match="REDIS_URL"):
        call_command("worker")



def test_serve_syncs_the_defaults_file_reports_a_bad_one_and_fires_beats_in_process(tmp_path):
    beats_file = tmp_path / "beats.json"
    beats_file.write_text('{"beats": [\n  {"tenant": "*", "name": "x", "cron": "0 8 * *", "prompt": "p"}\n]}\n')
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path / 'fresh.sqlite3'}", DJANGO_SECRET_KEY="serve-test-key",
               QORVEN_HEARTBEATS_FILE=str(beats_file))
    processes = Processes()
    try:
        server = processes.start("serve", "--port", str(free_port()), env=env)
        # Its start migrates the fresh file first: 5 to 6 s of CPU, past the minute this
        # waited before under a load of 10 on 2 cores. What it waits for is the line; the
        # bound is for a hang.
        server.wait_for_line("Qorven on http", timeout=SERVE_HANG)
    finally:
        processes.stop()
    output = server.output
    assert f"{beats_file}:2: beats[0].cron:" in output and "five" in output
    assert "was not synced, nothing changed" in output
    assert "Heartbeats fire in this process" in output
