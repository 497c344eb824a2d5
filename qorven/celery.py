"""The Celery app. Configured from Django settings (CELERY_* names)."""
from __future__ import annotations

import os

from celery import Celery, Task


class QorvenTask(Task):
    """Base task: without a broker, queue onto the in-process worker instead of a broker.

    This keeps the embedded default off the request path (the caller returns at once) and
    in order (one worker thread, FIFO), with no services to run.
    """

    def apply_async(self, args=None, kwargs=None, task_id=None, **options):  # type: ignore[override]
        from django.conf import settings

        if getattr(settings, "QORVEN_INPROCESS_TASKS", False):
            from qorven.taskqueue import inprocess_queue

            return inprocess_queue.submit(self, args or (), kwargs or {}, task_id=task_id)
        return super().apply_async(args=args, kwargs=kwargs, task_id=task_id, **options)


os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")

app = Celery("qorven", task_cls=QorvenTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.autodiscover_tasks(["qorven.agent"])
