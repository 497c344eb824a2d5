from __future__ import annotations

from memory_app.models import Memory
from memory_app.services import memory_add


def remember(world_or_tenant, qor, user, content, type=Memory.Type.FACT, **extra) -> Memory:
    """Store a memory through the service (as the tool and the admin do), so the
    full-text index is kept in step."""
    memory, _ = memory_add(tenant=world_or_tenant, qor=qor, user=user, type=type, content=content, **extra)
    return memory
