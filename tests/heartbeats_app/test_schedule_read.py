"""The beat reads its schedule while another process (`qorven serve` starting, the admin)
syncs the heartbeats defaults file: the beat starts, with every enabled beat scheduled once,
whichever of the file's versions it read."""
from __future__ import annotations

import json
import threading

import pytest
from celery import current_app
from django.db import connection, connections
from django_celery_beat.models import PeriodicTask

from heartbeats_app.defaults import beats_sync
from heartbeats_app.scheduler import HeartbeatScheduler
from heartbeats_app.services import RUN_TASK

pytestmark = pytest.mark.django_db(transaction=True)

# Every hour: django-celery-beat leaves out of its read the beats at a named hour more than
# two hours away.
BRIEF = {"tenant": "acme", "qor": "aria", "name": "brief", "cron": "0 * * * *", "prompt": "Morning brief"}
WEEKLY = {"tenant": "globex", "name": "weekly", "cron": "15 * * * 1", "prompt": "Weekly review"}


def sync_elsewhere(errors: list[Exception]) -> None:
    """beats_sync on a connection of its own, as another process's, committed when it returns."""
    def run() -> None:
        try:
            beats_sync()
        except Exception as exc:  # pragma: no cover - reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)


def tables_minutes() -> dict[str, set[int]]:
    """Each enabled heartbeat's PeriodicTask and the minutes it runs at, as the table says."""
    return {task.name: task.crontab.schedule.minute
            for task in PeriodicTask.objects.select_related("crontab").filter(enabled=True, task=RUN_TASK)}


def minutes(schedule: dict) -> dict[str, set[int]]:
    """The same, as the beat read it."""
    return {name: entry.schedule.minute for name, entry in schedule.items() if entry.task == RUN_TASK}


@pytest.mark.parametrize("second, workspace_deleted", [
    pytest.param([{**BRIEF, "cron": "30 * * * *"}, WEEKLY], False, id="a-beat-moved-to-another-time"),
    pytest.param([BRIEF], False, id="a-beat-dropped-from-the-file"),
    # Its beats went with it, their PeriodicTasks stayed: the sync deletes them.
    pytest.param([BRIEF], True, id="a-workspace-deleted"),
])
def test_the_beat_starts_while_another_process_syncs_the_file(world, settings, tmp_path, second, workspace_deleted):
    path = tmp_path / "heartbeats.json"
    settings.QORVEN_HEARTBEATS_FILE = path
    path.write_text(json.dumps({"beats": [BRIEF, WEEKLY]}))
    beats_sync()
    path.write_text(json.dumps({"beats": second}))
    if workspace_deleted:
        world.tenant_b.delete()
    before = tables_minutes()

    # The other process's sync commits right after the beat's read of the PeriodicTask
    # table, before the beat's next query (or, if it makes none, once the read is over).
    state = {"tasks_read": False, "synced": False}
    errors: list[Exception] = []

    def other_process_between_queries(execute, sql, params, many, context):
        if state["tasks_read"] and not state["synced"]:
            state["synced"] = True
            sync_elsewhere(errors)
        result = execute(sql, params, many, context)
        if sql.lstrip().upper().startswith("SELECT") and 'FROM "django_celery_beat_periodictask"' in sql:
            state["tasks_read"] = True
        return result

    app = current_app._get_current_object()
    with connection.execute_wrapper(other_process_between_queries):
        scheduler = HeartbeatScheduler(app=app, lazy=False)  # what `qorven beat` does first
    if not state["synced"]:
        sync_elsewhere(errors)
    assert errors == []
    assert state["tasks_read"]

    # What the beat read is one whole version of the table: each beat once, with its schedule.
    assert minutes(scheduler.schedule) in (before, tables_minutes())

    # And its next read has the file as it is now.
    scheduler._initial_read = True
    assert minutes(scheduler.schedule) == tables_minutes() and len(tables_minutes()) == len(second)
