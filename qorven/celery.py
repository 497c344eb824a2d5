"""The Celery app. Configured from Django settings (CELERY_* names).

Without a broker (the embedded default) tasks go to the `embedded://` broker and run on a
Celery worker thread of the publishing process (qorven.runtime); with one, on `qorven
worker` processes. Either way a task is published, retried and delayed the same way.
"""
from __future__ import annotations

import os

from celery import Celery

from .runtime import transport as _transport  # noqa: F401  registers the embedded:// broker
from .runtime import redis_transport as _redis_transport  # noqa: F401  registers redis:// (a restart survived)
from .runtime import worker as _worker  # noqa: F401  starts and counts the embedded worker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")

app = Celery("qorven")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
