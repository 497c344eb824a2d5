"""System checks of the conversation store."""
from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import connections


@checks.register(checks.Tags.database)
def append_trigger_check(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """On SQLite, appends rely on migration 0003's trigger; a table rebuilt by a later
    migration loses it. Database checks run with `check --database` and when
    `qorven serve` starts."""
    from .append_statement import TRIGGER, trigger_missing

    errors: list[checks.CheckMessage] = []
    for alias in databases or ():
        if trigger_missing(connections[alias]):
            errors.append(checks.Error(
                f"the SQLite trigger {TRIGGER} of sessions_app_message is missing, so appends would fail",
                hint="a migration rebuilt the messages table: end that migration with"
                     " RunPython(sessions_app.migrations._trigger.create_all_on_sqlite); on this database, run the"
                     " CREATE_TRIGGER statement of sessions_app/migrations/_trigger.py (`qorven dbshell`)",
                id="sessions_app.E001",
            ))
    return errors


@checks.register(checks.Tags.database)
def search_trigger_check(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """On SQLite, history search is kept by migration 0005's triggers; a table rebuilt by
    a later migration loses them."""
    from .search import search_triggers_missing

    errors: list[checks.CheckMessage] = []
    for alias in databases or ():
        missing = search_triggers_missing(connections[alias])
        if missing:
            errors.append(checks.Error(
                f"the SQLite triggers {', '.join(missing)} of sessions_app_message are missing, so new messages"
                " are not found by history search",
                hint="a migration rebuilt the messages table: end it with"
                     " RunPython(sessions_app.migrations._trigger.create_all_on_sqlite)",
                id="sessions_app.E002",
            ))
    return errors
