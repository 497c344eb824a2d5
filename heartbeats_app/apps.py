from __future__ import annotations

from django.apps import AppConfig


class HeartbeatsAppConfig(AppConfig):
    name = "heartbeats_app"
    verbose_name = "Heartbeats"

    def ready(self) -> None:
        from tenancy.signals import tenant_retimed

        from .services import heartbeats_retime

        def retime(sender: object, tenant: object, **kwargs: object) -> None:
            heartbeats_retime(tenant=tenant)  # beats without their own timezone follow the tenant's

        tenant_retimed.connect(retime, dispatch_uid="heartbeats_app.retime", weak=False)
