"""Two installs sharing one Redis database keep apart: the beat's liveness keys under the
cache prefix, Celery's queues under QORVEN_BROKER_PREFIX (CI's second pass, with Redis)."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings

from heartbeats_app.liveness import BeatReport, beats_alive

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs Redis (REDIS_URL, as in CI's second pass)")


def test_a_beat_reported_by_one_install_is_not_counted_by_another(settings):
    ours = f"install-a-{uuid.uuid4().hex[:6]}"
    settings.QORVEN_CACHE_PREFIX = ours
    beat = BeatReport()
    beat.report()
    try:
        assert beat.name in beats_alive()
        settings.QORVEN_CACHE_PREFIX = f"install-b-{uuid.uuid4().hex[:6]}"
        assert beats_alive() == []
    finally:
        settings.QORVEN_CACHE_PREFIX = ours
        beat.withdraw()
    assert beats_alive() == []


def test_tasks_of_an_install_with_a_broker_prefix_queue_under_it():
    prefix = f"install-{uuid.uuid4().hex[:6]}:"
    code = ("import django; django.setup(); from qorven.celery import app; "
            "app.send_task('qorven.prefix_probe', queue='celery')")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "qorven.settings", "QORVEN_BROKER_PREFIX": prefix}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    try:
        assert client.llen(f"{prefix}celery") == 1  # where only that install's workers look
    finally:
        client.delete(f"{prefix}celery", *client.keys(f"{prefix}*"))


def test_a_model_servers_cap_is_counted_per_install(settings):
    """Two installs on one Redis database, each capping the same model server at one call:
    a call held by one does not make the other's wait (its cap is its own setting)."""
    from qorven.runtime.route_slots import SlotTimeout, route_slot

    base_url = f"http://model-{uuid.uuid4().hex[:6]}.invalid/v1"
    settings.QORVEN_CACHE_PREFIX = f"install-a-{uuid.uuid4().hex[:6]}"
    with route_slot(base_url=base_url, cap=1, wait=5, lease=30):
        settings.QORVEN_CACHE_PREFIX = f"install-b-{uuid.uuid4().hex[:6]}"
        with route_slot(base_url=base_url, cap=1, wait=0.5, lease=30):
            pass  # the other install's slot, free
    with pytest.raises(SlotTimeout):  # and within one install the cap still holds
        with route_slot(base_url=base_url, cap=1, wait=5, lease=30):
            with route_slot(base_url=base_url, cap=1, wait=0.3, lease=30):
                pass
