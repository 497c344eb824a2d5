"""Domain events of tenancy, for the apps above it (which tenancy never imports).

`tenant_retimed(sender=Tenant, tenant=…)`: a tenant's timezone changed; heartbeats that
follow the tenant's timezone are rescheduled by their app.
"""
from __future__ import annotations

from django.dispatch import Signal

tenant_retimed = Signal()
