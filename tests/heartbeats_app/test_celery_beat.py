"""A heartbeat due now runs once on PostgreSQL with real Celery worker and beat processes
over Redis (CI's second pass), records its output and lands in the user's canonical chat
tagged with the target channel; `qorven doctor` tells one beat from none and from two."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from channels_app.doctor import doctor_checks
from heartbeats_app.liveness import beats_alive
from heartbeats_app.models import Heartbeat, HeartbeatRun
from sessions_app.models import Message

from ..factories.heartbeats_app import beat
from ..processes import Processes, process_env, wait_for
from ..fakes.model_server import reply

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.celery_worker,
    pytest.mark.skipif(
        not django_settings.REDIS_URL or connection.vendor != "postgresql",
        reason="needs PostgreSQL and a Redis broker (DATABASE_URL and REDIS_URL, as in CI's second pass)",
    ),
]


@pytest.fixture
def start_processes(model_server, settings, tmp_path):
    """Starts a Celery worker and two beat processes (as if someone started a second one
    by mistake), all against the test database."""
    beats_file = tmp_path / "beats.json"
    beats_file.write_text('{"beats": []}')
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "OPENAI_BASE_URL": model_server.base_url,
        "OPENAI_API_KEY": "test-key",
        "QORVEN_MODEL": "scripted-model",
        "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,
        "QORVEN_HEARTBEATS_FILE": str(beats_file),
    }
    qorven = str(Path(sys.executable).with_name("qorven"))
    Processes().purge(env)
    procs: list[subprocess.Popen] = []

    def start(*, beats: int = 2, worker: bool = True) -> list[subprocess.Popen]:
        commands = [[qorven, "worker", "--concurrency", "2"]] * worker + [[qorven, "beat", "--max-interval", "1"]] * beats
        procs.extend(
            subprocess.Popen(c, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for c in commands
        )
        return procs

    yield start
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_a_due_heartbeat_runs_once_and_is_delivered_to_the_canonical_chat(world, model_server, start_processes):
    # Hourly at the minute that just passed: due now (it last ran two hours ago), and not
    # due again for most of an hour, so exactly one run is right.
    minute = (timezone.now() - timedelta(minutes=1)).minute
    hb = beat(world.qor_a, name="hourly", cron=f"{minute} * * * *", prompt="Anything Alice should know?",
              owner=world.alice, deliver_to=world.alice, deliver_channel="telegram")
    PeriodicTask.objects.filter(pk=hb.periodic_task_id).update(last_run_at=timezone.now() - timedelta(hours=2))
    model_server.default = reply("Your 3pm moved to 4pm.")

    procs = start_processes()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not HeartbeatRun.objects.filter(status="ok").exists():
        for proc in procs:
            assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.3)
    time.sleep(4)  # the second beat's copy of the tick, or a re-send, would have run by now

    (run,) = HeartbeatRun.objects.all()
    assert (run.status, run.output, run.manual) == ("ok", "Your 3pm moved to 4pm.", False)
    (beats,) = doctor_checks(areas=frozenset({"beat"}))  # the second beat is found out
    assert not beats.ok and beats.detail.startswith("2 beats running") and "stop all but one" in beats.fix
    assert run.tick.minute == minute and run.tick.second == 0
    hb = Heartbeat.objects.get(pk=hb.pk)
    assert (hb.last_status, hb.last_output, hb.tokens_spent) == ("ok", "Your 3pm moved to 4pm.", 18)
    assert len(model_server.requests) == 1
    (delivered,) = Message.objects.filter(session__kind="canonical", session__user=world.alice)
    assert (delivered.role, delivered.channel, delivered.content) == ("assistant", "telegram", "Your 3pm moved to 4pm.")
    assert Message.objects.filter(session__kind="cron", session__user=world.alice).count() == 2


def test_the_doctor_sees_one_beat_running_and_none_once_it_stops(world, start_processes):
    (proc,) = start_processes(beats=1, worker=False)
    assert wait_for(lambda: beats_alive(), 60), "the beat never reported itself"
    (check,) = doctor_checks(areas=frozenset({"beat"}))
    assert check.ok and check.detail == f"one beat running: {beats_alive()[0]}"
    proc.terminate()
    proc.wait(20)
    assert beats_alive() == []  # withdrawn as it stopped, not left to lapse
    (check,) = doctor_checks(areas=frozenset({"beat"}))
    assert not check.ok and "start exactly one `qorven beat`" in check.fix


@pytest.mark.parametrize(("level", "shown", "left_out"), [
    ("DEBUG", "Sending due task __qorven_sweep__", ""),
    ("WARNING", "", "beat: Starting"),
])
def test_qorven_beat_logs_at_the_level_qorven_log_level_sets(world, processes, level, shown, left_out):
    """`qorven beat` logged at INFO whatever QORVEN_LOG_LEVEL said (its --loglevel defaulted
    to INFO): at DEBUG the upkeep tasks sent, which the README says DEBUG shows, never were;
    at WARNING its INFO lines still were."""
    env = process_env(QORVEN_LOG_LEVEL=level, QORVEN_SWEEP_INTERVAL="1")
    beat_process = processes.start("beat", "--max-interval", "1", "--no-sync", env=env)
    if shown:
        beat_process.wait_for_line(shown, timeout=60)
    else:
        assert wait_for(lambda: beats_alive(), 60, processes=processes), beat_process.output
        time.sleep(2)  # two sweeps sent meanwhile
        assert left_out not in beat_process.output and " INFO " not in beat_process.output, beat_process.output
