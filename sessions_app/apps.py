from __future__ import annotations

from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Conversations"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.backends.signals import connection_created

        from tenancy.models import Qor, Tenant

        from . import checks  # noqa: F401  registers the store's system checks
        from .retention import search_index_settle_receiver
        from .search import sqlite_search_text_function

        search_index_settle_receiver.connect(get_user_model(), Tenant, Qor)
        connection_created.connect(sqlite_search_text_function, dispatch_uid="sessions_app.search_text_function")
