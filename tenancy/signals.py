"""Domain events of tenancy, for the apps above it (which tenancy never imports).

`tenant_retimed(sender=Tenant, tenant=…)`: a tenant's timezone changed; heartbeats that
follow the tenant's timezone are rescheduled by their app.

`tenant_suspension_changed(sender=Tenant, tenant=…)`: the host suspended or resumed the
tenant (tenancy.services.tenant_suspend / tenant_resume), after the change is stored.
"""
from __future__ import annotations

from django.dispatch import Signal

tenant_retimed = Signal()

# `person_retimed(sender=Membership, tenant=…, user=…)`: a person's own timezone changed;
# their heartbeats that follow it are rescheduled by their app, whose receiver returns how
# many it moved.
person_retimed = Signal()
tenant_suspension_changed = Signal()
