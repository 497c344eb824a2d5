"""Failover across worker processes (CI's PostgreSQL + Redis pass): a route that one
worker found rate-limited is skipped by another worker while it cools down."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from qorven.runtime.cooldowns import cooldown_clear
from sessions_app.models import Message
from tenancy.models import ModelFallback, Qor
from tenancy.services import api_token_create

from ..fakes.model_server import ModelServer, error, reply

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
def two_servers():
    started = [ModelServer().start(), ModelServer().start()]
    yield started
    for server, model in zip(started, ("primary-model", "fallback-model")):
        cooldown_clear(base_url=server.base_url, model=model)
        server.stop()


def _worker() -> subprocess.Popen:
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,
        "QORVEN_ALLOW_PRIVATE_HOSTS": "127.0.0.1",  # the fakes listen on loopback
        "QORVEN_MODEL_RETRIES": "0",
    }
    qorven = str(Path(sys.executable).with_name("qorven"))
    return subprocess.Popen([qorven, "worker", "--concurrency", "1"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _stop(worker: subprocess.Popen) -> None:
    worker.terminate()
    try:
        worker.wait(20)
    except subprocess.TimeoutExpired:
        worker.kill()


def _ask_and_wait(client, world, user, text: str, worker: subprocess.Popen) -> str:
    token = api_token_create(tenant=world.tenant_a, user=user)[1]
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = Message.objects.filter(role="assistant", session__user=user).first()
        if found is not None:
            return found.content
        assert worker.poll() is None, worker.stdout.read()
        time.sleep(0.2)
    raise AssertionError("no answer in time")


def test_a_route_one_worker_found_rate_limited_is_skipped_by_another(client, world, two_servers):
    primary, fallback = two_servers
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=primary.base_url, main_model="primary-model")
    ModelFallback.objects.create(qor=world.qor_a, role="main", base_url=fallback.base_url, model="fallback-model")
    primary.default = error(429, "slow down")
    fallback.default = reply("From the fallback.")
    subprocess.run([sys.executable, "-m", "celery", "-A", "qorven", "purge", "-f"], cwd=ROOT,
                   env={**os.environ, "DJANGO_SECRET_KEY": django_settings.SECRET_KEY}, capture_output=True,
                   timeout=60)

    first = _worker()
    try:
        assert _ask_and_wait(client, world, world.alice, "to the first worker", first) == "From the fallback."
    finally:
        _stop(first)
    assert (len(primary.requests), len(fallback.requests)) == (1, 1)

    second = _worker()  # another process: it knows the cooldown only through Redis
    try:
        assert _ask_and_wait(client, world, world.bob, "to the second worker", second) == "From the fallback."
    finally:
        _stop(second)
    assert (len(primary.requests), len(fallback.requests)) == (1, 2)
