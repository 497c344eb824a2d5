"""`qorven serve` and `qorven beat` started with PostgreSQL refusing connections say at
once which database they wait for and PostgreSQL's reason, in one line, the connection
pool left out of it until the database takes a connection. (That they then start once it
does: tests/reliability/test_postgres_kills.py.)"""
from __future__ import annotations

import os
import time

import pytest

from ..processes import Processes, free_port


@pytest.mark.parametrize("command", [["beat"], ["serve", "--no-beat"]])
def test_a_process_started_with_postgresql_refusing_says_why_at_once_without_the_pool_warnings(command):
    """It said "waiting for the database (…): couldn't get a connection after 10.00 sec"
    only after the pool's 10 s, the reason left out, under the pool's own tries: 15
    WARNING lines of two in the first 20 s."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(DJANGO_SECRET_KEY="wait-test", DATABASE_URL=f"postgres://qorven:pg-s3cret@127.0.0.1:{port}/qorven",
               REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    if command[0] == "serve":
        command = [*command, "--port", str(free_port())]
    processes = Processes()
    try:
        began = time.monotonic()
        process = processes.start(*command, env=env)
        process.wait_for_line("waiting for the database (PostgreSQL database qorven on", 30)
        said = time.monotonic() - began
        time.sleep(3)  # still waiting: what it prints meanwhile
        output = process.output
    finally:
        processes.stop()
    line = next(line for line in output.splitlines() if "waiting for the database" in line)
    assert line.endswith(f"on 127.0.0.1:{port}): Connection refused"), line
    assert said < 8, said
    assert "psycopg.pool" not in output and "Traceback" not in output, output[-2000:]
    assert "pg-s3cret" not in output


def test_a_worker_started_with_postgresql_refusing_says_why_its_skills_were_not_synced_in_one_line():
    """`qorven worker` syncs the skills folder as it starts: with PostgreSQL refusing, that
    took the pool's 10 s (15 of its two-line warnings) and ended in an ERROR with a
    traceback, then "Skills were not synced: couldn't get a connection after 10.00 sec"."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(DJANGO_SECRET_KEY="wait-test", DATABASE_URL=f"postgres://qorven:pg-s3cret@127.0.0.1:{port}/qorven",
               REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    processes = Processes()
    try:
        began = time.monotonic()
        process = processes.start("worker", "--concurrency", "1", env=env)
        process.wait_for_line("Skills were not synced", 30)
        said = time.monotonic() - began
        output = process.output
    finally:
        processes.stop()
    before = output[:output.index("Skills were not synced")]
    line = next(line for line in output.splitlines() if "Skills were not synced" in line)
    assert line.endswith(f"on 127.0.0.1:{port}): Connection refused"), line
    assert said < 8, said
    assert "psycopg.pool" not in before and "Traceback" not in before, before[-2000:]
    assert "pg-s3cret" not in output
