"""REDIS_URL naming a Unix socket (`unix:///path/to/redis.sock?db=N`, as the README allows)
serves the broker as it serves the cache and the live layer: a task queued goes to that
Redis, in that database."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..processes import wait_for

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")

ROOT = Path(__file__).resolve().parents[2]
QUEUE_A_TASK = """
import django
django.setup()
from channels_app.tasks import deliver_message_task
deliver_message_task.delay(0, 0)
print("queued")
"""


def test_a_task_is_queued_on_a_redis_unix_socket(tmp_path):
    """Before, Celery's broker took REDIS_URL as it is, and kombu knows no `unix://`: every
    task queued (each webhook's, each turn's) failed with "No such transport: unix"."""
    path = tmp_path / "redis.sock"
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(path), "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: subprocess.run(["redis-cli", "-s", str(path), "ping"], capture_output=True,
                                               text=True).stdout.strip() == "PONG", 10)
        environment = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CELERY_BROKER_URL")}
        done = subprocess.run([sys.executable, "-c", QUEUE_A_TASK], capture_output=True, text=True, cwd=ROOT,
                              timeout=120, env={**environment, "DJANGO_SETTINGS_MODULE": "qorven.settings",
                                                "DJANGO_SECRET_KEY": "x", "REDIS_URL": f"unix://{path}?db=3"})
        queued = subprocess.run(["redis-cli", "-s", str(path), "-n", "3", "llen", "qorven.outbound"], capture_output=True,
                                text=True).stdout.strip()
    finally:
        redis.terminate()
        redis.wait(10)
    assert done.returncode == 0 and done.stdout.strip() == "queued", done.stderr[-1500:]
    assert queued == "1"  # a send's task, on the sends' queue, in database 3
