"""A worker's child warms up as it starts (qorven.runtime.management.commands.worker
._child_warm) without ever holding the child up past Celery's 4 s for it to report up."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from django.db import connection, transaction

from ..processes import ROOT, process_env

SCRIPT = """
import logging, time
import django
django.setup()
from celery import current_app
import qorven.celery  # noqa: F401
current_app.loader.import_default_modules()  # the tasks' modules, as a worker imports them
from qorven.runtime import prepared_read
from qorven.runtime.management.commands.worker import _child_connections, _child_warm
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
_child_connections()  # as a child starts: its own connection, no pool
started = time.monotonic()
_child_warm()
print(f"reads={len(prepared_read._every)} took={time.monotonic() - started:.2f}", flush=True)
"""


def run_warm(env: dict[str, str]) -> tuple[int, float, str]:
    """_child_warm in a process of its own, as a worker's child runs it: (reads, seconds, log)."""
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=90)  # Django and the tasks imported on a busy machine
    assert done.returncode == 0, done.stderr
    reads, took = (part.split("=")[1] for part in done.stdout.split())
    return int(reads), float(took), done.stderr


def test_a_child_whose_database_does_not_answer_gives_up_warming_within_two_seconds():
    silent = socket.socket()  # takes connections (the kernel does) and never says a word
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CELERY_BROKER_URL")}
    env.update(DJANGO_SETTINGS_MODULE="qorven.settings", DJANGO_SECRET_KEY="warm-test",
               DATABASE_URL=f"postgres://qorven@127.0.0.1:{port}/qorven")
    try:
        reads, took, log = run_warm(env)
    finally:
        silent.close()
    assert reads >= 10  # there was something to warm
    assert 1.9 <= took < 3.0  # the bounded connect, not the driver's own wait (none)
    assert "did not warm up (its first task will)" in log


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL (DATABASE_URL, as in CI's second pass)")
def test_a_child_whose_reads_are_held_up_gives_up_warming_in_well_under_a_second():
    """The database answers, but a read waits (here for a lock another session holds)."""
    env = process_env()
    env.pop("REDIS_URL", None)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("LOCK TABLE channels_app_inboundevent IN ACCESS EXCLUSIVE MODE")
        reads, took, log = run_warm(env)
    assert reads >= 10
    assert took < 1.5  # each read bounded (and the reads as a whole), not the lock's holder
    assert "did not warm up (its first task will)" in log and "statement timeout" in log
