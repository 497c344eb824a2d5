"""Celery reads its configuration through Django's settings (CELERY_* names): a name they
lack costs two failed attribute reads on every look-up, so what a publish reads is named
there (qorven/settings.py)."""
from __future__ import annotations

import threading

import pytest
from celery.utils.collections import ConfigurationView
from django.conf import settings

from channels_app.tasks import deliver_message_task
from qorven.runtime.publish import tasks_publish

pytestmark = pytest.mark.django_db(transaction=True)


def test_publishing_tasks_reads_only_settings_django_names(monkeypatch, drain):
    read: set[str] = set()
    look_up = ConfigurationView.__getitem__
    publishing = threading.current_thread()

    def noting(view, key):
        # What the publishing thread reads: the in-process worker running the tasks (one of
        # its threads making its own result backend the first time) reads settings of its own.
        if threading.current_thread() is publishing:
            read.add(key)
        return look_up(view, key)

    def publish() -> None:  # no such message: each task finds nothing to send
        deliver_message_task.delay(0, 0)
        tasks_publish(deliver_message_task, [(0, 0), (0, 0)])

    publish()  # what is read once (the result backend, the producer pool) is not the point
    drain()
    monkeypatch.setattr(ConfigurationView, "__getitem__", noting)
    publish()
    monkeypatch.undo()
    drain()
    assert read, "publishing read no Celery setting at all"
    assert sorted(k for k in read if not hasattr(settings, f"CELERY_{k.upper()}")) == []
