"""Reads of the edges' own data: channel bindings and identities."""
from __future__ import annotations

from django.contrib.auth.models import User

from tenancy.models import Qor, Tenant

from .models import ChannelBinding, Identity


def telegram_secret_of(*, tenant: Tenant, qor: Qor, token: str) -> str:
    """The webhook secret of the Qor's binding for the bot with this token ("" when the
    bot is not bound to it): binding the bot again keeps it, and so updates that binding."""
    for credentials in ChannelBinding.objects.filter(tenant=tenant, qor=qor, kind=ChannelBinding.Kind.TELEGRAM) \
            .order_by("pk").values_list("credentials", flat=True):
        if isinstance(credentials, dict) and credentials.get("token") == token and credentials.get("secret"):
            return str(credentials["secret"])
    return ""


def identities_of_person(*, tenant: Tenant, user: User, after_id: int = 0, limit: int = 500) -> list[Identity]:
    """The person's accounts on the tenant's channels (paired to them), by id after `after_id`."""
    return list(Identity.objects.filter(tenant=tenant, user=user, pk__gt=after_id).order_by("pk")[:limit])
