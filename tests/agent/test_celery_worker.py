"""Turns on a real Celery worker over Redis (run in CI's PostgreSQL + Redis pass)."""
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

from sessions_app.models import Message
from tenancy.services import api_token_create

from ..fakes.model_server import reply
from ..processes import Processes

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
def celery_worker(model_server, settings):
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "OPENAI_BASE_URL": model_server.base_url,
        "OPENAI_API_KEY": "test-key",
        "QORVEN_MODEL": "scripted-model",
        "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,
    }
    qorven = str(Path(sys.executable).with_name("qorven"))
    Processes().purge(env)
    proc = subprocess.Popen([qorven, "worker", "--concurrency", "2"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    yield proc
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_back_to_back_messages_are_answered_in_order_by_two_worker_processes(client, world, celery_worker, model_server):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(reply("First answer.", delay=1.0), reply("Second answer."))
    for text in ("first question", "second question"):
        response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        answers = list(Message.objects.filter(role="assistant").order_by("seq").values_list("content", flat=True))
        if len(answers) >= 2:
            break
        assert celery_worker.poll() is None, celery_worker.stdout.read()
        time.sleep(0.2)
    time.sleep(1.0)  # a duplicate would show up now
    answers = list(Message.objects.filter(role="assistant").order_by("seq").values_list("content", flat=True))
    assert answers == ["First answer.", "Second answer."]
    assert len(model_server.requests) == 2
    second = model_server.requests[1]["messages"][1:]
    assert second == [
        {"role": "user", "content": "[web] Alice: first question"},
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": "[web] Alice: second question"},
    ]
