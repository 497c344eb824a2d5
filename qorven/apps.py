from __future__ import annotations

from django.apps import AppConfig


class QorvenConfig(AppConfig):
    name = "qorven"
    verbose_name = "Qorven tenancy"
