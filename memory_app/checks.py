"""System checks of long-term memory."""
from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import connections


@checks.register(checks.Tags.database)
def search_trigger_check(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """On SQLite, a deleted memory leaves the search index through migration 0005's
    trigger; a table rebuilt by a later migration loses it. Database checks run with
    `check --database` and when `qorven serve` starts."""
    from .selectors import delete_trigger_missing
    from .migrations._trigger import DELETE_TRIGGER

    errors: list[checks.CheckMessage] = []
    for alias in databases or ():
        if delete_trigger_missing(connections[alias]):
            errors.append(checks.Error(
                f"the SQLite trigger {DELETE_TRIGGER} of memory_app_memory is missing, so a deleted memory's text"
                " stays in the search index",
                hint="a migration rebuilt the memories table: end it with"
                     " RunPython(memory_app.migrations._trigger.create_on_sqlite)",
                id="memory_app.E001",
            ))
    return errors
