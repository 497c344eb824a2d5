from __future__ import annotations

from django.apps import AppConfig


class AgentConfig(AppConfig):
    """One turn: routing an inbound message, the prompt, the one tool loop. Its slash
    commands (`/help`, `/retry`, `/status`, `/history`) and tasks are discovered like any
    app's."""

    name = "qorven.agent"
    label = "agent"
    verbose_name = "Agent"

    def ready(self) -> None:
        from memory_app.compact_hooks import compact_start_hooks
        from qorven.runtime.startup import Startup, on_startup

        from .slot_places import slot_places_before_compact

        compact_start_hooks.append(slot_places_before_compact)

        @on_startup("serve")
        def models_banner(startup: Startup) -> None:
            """Which model answers each Qor, so a missing one is seen before a message is sent."""
            for line in model_lines():
                startup.stdout.write(line)

        @on_startup("serve", "worker")
        def model_sdk_load(startup: Startup) -> None:
            """Import the model SDK and build the host's model client now, not on the
            first turn (about a second here): a worker's children are forked after
            this and start with both."""
            from qorven.llm import sdk_load

            sdk_load()


def model_lines() -> list[str]:
    from urllib.parse import urlsplit

    from qorven.llm import route_for
    from tenancy.models import Qor

    lines = []
    for qor in Qor.objects.select_related("tenant").order_by("tenant__slug", "slug"):
        route = route_for(qor, "main")
        where = f"{qor.tenant.slug}/{qor.slug}"
        if route.offline:
            lines.append(f"{where}: offline — no model configured (run `qorven setup`, or set OPENAI_BASE_URL "
                         "and QORVEN_MODEL)")
        else:
            lines.append(f"{where}: {route.model} at {urlsplit(route.base_url).netloc or route.base_url}")
    return lines
