from __future__ import annotations

from django.apps import AppConfig


class AgentConfig(AppConfig):
    """One turn: routing an inbound message, the prompt, the one tool loop. Its slash
    commands (`/help`, `/retry`, `/status`, `/history`) and tasks are discovered like any
    app's."""

    name = "qorven.agent"
    label = "agent"
    verbose_name = "Agent"
