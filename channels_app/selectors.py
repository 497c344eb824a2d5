"""Reads of the edges' own data: channel bindings."""
from __future__ import annotations

from tenancy.models import Qor, Tenant

from .models import ChannelBinding


def telegram_secret_of(*, tenant: Tenant, qor: Qor, token: str) -> str:
    """The webhook secret of the Qor's binding for the bot with this token ("" when the
    bot is not bound to it): binding the bot again keeps it, and so updates that binding."""
    for credentials in ChannelBinding.objects.filter(tenant=tenant, qor=qor, kind=ChannelBinding.Kind.TELEGRAM) \
            .order_by("pk").values_list("credentials", flat=True):
        if isinstance(credentials, dict) and credentials.get("token") == token and credentials.get("secret"):
            return str(credentials["secret"])
    return ""
