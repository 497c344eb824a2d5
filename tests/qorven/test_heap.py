"""What a server or worker process holds once it has started is set aside from the garbage
collector's full collections (qorven.runtime.heap): a full collection walked all of Django
and every imported module, a pause in which no socket of the server got a frame."""
from __future__ import annotations

import gc
import io

import pytest

pytestmark = pytest.mark.django_db
from django.core.management import call_command


def test_serve_sets_its_startup_objects_aside_before_it_serves(serve_once):
    import qorven.asgi  # what the server serves, loaded before the freeze

    serve_once()
    frozen = gc.get_freeze_count()
    assert frozen > 10_000
    # The app's own objects are among them: a full collection no longer visits them.
    assert gc.is_tracked(qorven.asgi.application) and _visited_by_full_collection(qorven.asgi.application) is False


def test_the_worker_sets_its_startup_objects_aside_before_its_pool_forks(settings, monkeypatch):
    from qorven.celery import app

    settings.CELERY_BROKER_URL = "redis://unused"
    frozen_at_start: list[int] = []
    monkeypatch.setattr(app, "worker_main", lambda argv: frozen_at_start.append(gc.get_freeze_count()))
    call_command("worker", "--metrics-port", "0", stdout=io.StringIO(), stderr=io.StringIO())
    assert frozen_at_start and frozen_at_start[0] > 10_000


def test_what_is_made_after_the_freeze_is_collected_as_before():
    from qorven.runtime.heap import startup_heap_freeze

    startup_heap_freeze()

    class Cycle:
        pass

    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2


def _visited_by_full_collection(obj: object) -> bool:
    """Whether a full collection still walks `obj`: frozen objects are in no generation, so
    gc.get_objects() of every generation leaves them out."""
    return any(found is obj for generation in range(3) for found in gc.get_objects(generation))
