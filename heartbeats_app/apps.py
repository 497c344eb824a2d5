from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import AppConfig

if TYPE_CHECKING:
    from .scheduler import EmbeddedBeat


class HeartbeatsAppConfig(AppConfig):
    name = "heartbeats_app"
    verbose_name = "Heartbeats"

    def ready(self) -> None:
        from tenancy.signals import person_retimed, tenant_retimed

        from .services import heartbeats_retime

        def retime(sender: object, tenant: object, **kwargs: object) -> None:
            heartbeats_retime(tenant=tenant)  # beats without their own timezone follow the tenant's

        def retime_person(sender: object, tenant: object, user: object, **kwargs: object) -> int:
            return heartbeats_retime(tenant=tenant, owner=user)  # and their owner's, once set

        tenant_retimed.connect(retime, dispatch_uid="heartbeats_app.retime", weak=False)
        person_retimed.connect(retime_person, dispatch_uid="heartbeats_app.retime_person", weak=False)
        from qorven.runtime.startup import Startup, on_shutdown, on_startup

        # What the hooks below import (pydantic, django-celery-beat's scheduler), only
        # the commands they run for import.

        @on_startup("serve")
        def beats_sync(startup: Startup) -> None:
            from .startup import beats_sync_on_startup

            beats_sync_on_startup(startup.stdout, startup.stderr)

        @on_startup("serve")
        def backup_beat_sync(startup: Startup) -> None:
            if startup.embedded and not startup.options.get("no_beat"):  # else `qorven beat` syncs it
                from .startup import backup_beat_sync_on_startup

                backup_beat_sync_on_startup(startup.stdout)

        @on_startup("serve", after_worker=True)
        def embedded_beat(startup: Startup) -> None:
            if startup.embedded and not startup.options.get("no_beat"):
                from .scheduler import embedded_beat_start

                started.append(embedded_beat_start())
                startup.stdout.write("Heartbeats fire in this process (embedded beat).")

        started: list[EmbeddedBeat] = []

        @on_shutdown("serve")
        def embedded_beat_stop(startup: Startup) -> None:
            # First, while the running tasks finish: a beat coming due now would queue a run
            # that is only swept up at the next start, or run half-way and be cut off.
            while started:
                started.pop().stop()
