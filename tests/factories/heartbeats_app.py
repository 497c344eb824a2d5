from __future__ import annotations

from typing import Any

from heartbeats_app.models import Heartbeat
from heartbeats_app.services import heartbeat_create


def beat(qor, name: str = "check-in", cron: str = "0 8 * * *", prompt: str = "Anything to tell?", **kw: Any) -> Heartbeat:
    """A heartbeat made through the service, so it has its PeriodicTask like a real one."""
    return heartbeat_create(tenant=qor.tenant, qor=qor, name=name, cron=cron, prompt=prompt, **kw)
