from __future__ import annotations

from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    name = "memory_app"
    verbose_name = "Memory"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model

        from qorven.runtime.startup import Startup, on_startup
        from tenancy.models import Qor, Tenant

        from . import checks  # noqa: F401  registers memory's system checks
        from .services import memory_index_settle_receiver

        memory_index_settle_receiver.connect(get_user_model(), Tenant, Qor)
        from django.db.models.signals import post_delete, post_save

        from .models import LearnedSkill
        from .selectors import enabled_skills

        for signal in (post_save, post_delete):
            signal.connect(enabled_skills.clear, sender=LearnedSkill, dispatch_uid="memory_app.enabled_skills")
        from tenancy.signals import tenant_suspension_changed

        from .voice import on_tenant_suspension_changed

        tenant_suspension_changed.connect(on_tenant_suspension_changed, dispatch_uid="memory_app.voice.resume")

        @on_startup("serve", "worker")
        def skills_sync(startup: Startup) -> None:
            from .skills import skills_sync_on_startup  # only serve and worker need it (regex)

            skills_sync_on_startup(startup.stdout, startup.stderr)
