"""The Celery app. Configured from Django settings (CELERY_* names).

Without a broker (the embedded default) tasks go to the `embedded://` broker and run on a
Celery worker thread of the publishing process (qorven.runtime); with one, on `qorven
worker` processes. Either way a task is published, retried and delayed the same way.
"""
from __future__ import annotations

import os

from celery import Celery

# Registers the embedded:// broker and redis:// (a restart survived), imported when used.
from .runtime import broker_transports as _broker_transports  # noqa: F401
from .runtime import worker as _worker  # noqa: F401  starts and counts the embedded worker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")

app = Celery("qorven")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
