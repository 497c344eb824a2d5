"""Real Qorven processes (`qorven worker`, `qorven beat`) against the test database and
Redis, for the tests that need the scale-out layout's own behaviour (CI's PostgreSQL +
Redis pass). Each runs in a process group of its own, so a test can kill it outright."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
QORVEN = str(Path(sys.executable).with_name("qorven"))

needs_postgres_and_redis = pytest.mark.skipif(
    not django_settings.REDIS_URL or connection.vendor != "postgresql",
    reason="needs PostgreSQL and a Redis broker (DATABASE_URL and REDIS_URL, as in CI's second pass)",
)


def process_env(model_server=None, **extra: str) -> dict[str, str]:
    """The environment of a process working on this test run's database and broker."""
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": django_settings.REDIS_URL,
        "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,
    }
    env.pop("CELERY_BROKER_URL", None)
    if model_server is not None:
        env.update(OPENAI_BASE_URL=model_server.base_url, OPENAI_API_KEY="test-key", QORVEN_MODEL="scripted-model")
    for name in ("TELEGRAM_API_BASE", "WHATSAPP_API_BASE", "SLACK_API_BASE", "DISCORD_API_BASE", "TWILIO_API_BASE"):
        env[name] = str(getattr(django_settings, name))
    env.update(extra)
    return env


class Processes:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str, env: dict[str, str]) -> subprocess.Popen:
        proc = subprocess.Popen([QORVEN, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.procs.append(proc)
        return proc

    def purge(self, env: dict[str, str]) -> None:
        """Empty the broker's queue (a task left by an earlier run must not run here)."""
        subprocess.run([sys.executable, "-m", "celery", "-A", "qorven", "purge", "-f"], cwd=ROOT, env=env,
                       capture_output=True, timeout=60, check=False)

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        """SIGKILL to the whole process group: no warm shutdown, no requeue by prefork."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def alive(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else "exited"

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


@pytest.fixture
def processes():
    running = Processes()
    yield running
    running.stop()


def wait_for(predicate, timeout: float, *, processes: Processes | None = None, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if processes is not None:
            processes.alive()
        time.sleep(step)
    return False
