"""A chat socket lives only as long as the sign-in that opened it.

A socket is authenticated once, when it opens; the Django session or API token behind it
can end later — sign-out in another tab, a password change (which invalidates every other
session of the user), deactivation, removal from the tenant, a revoked token, the host
suspending the tenant. Each of
those tells the user's open sockets (`auth_group`), and each socket checks its own
credentials again and closes if they no longer hold; sockets also check again now and
then (each socket at a period of its own between half of RECHECK_EVERY and all of it while
open, and on a client's ping once RECHECK_EVERY has passed), for sessions
and tokens that simply expire.
"""
from __future__ import annotations

import hashlib
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.db import transaction
from django.utils.crypto import constant_time_compare

from qorven.runtime.publisher import broadcast_group_soon
from tenancy.errors import NotFound
from tenancy.selectors import api_token_authenticate

from .chat import chat_owner

# A password change saves the user first and the changing session's new hash a moment
# later (update_session_auth_hash): sockets wait this long before checking, so the session
# that made the change is not taken for one it invalidated.
RECHECK_DELAY = 1.0
RECHECK_EVERY = 60.0  # seconds between a socket's own checks (and those a client's pings trigger)


def auth_group(user_id: int) -> str:
    return f"qorven.auth.{user_id}"


def webchat_auth_group(tenant_id: int) -> str:
    """The tenant's webchat visitor sockets: told when an embed's binding or the workspace's
    webchat switch changes."""
    return f"qorven.auth.webchat.{tenant_id}"


def session_fingerprint(session_key: str | None) -> str:
    """Names a Django session on the layer without carrying its key (a credential)."""
    return hashlib.sha256(f"qorven-live:{session_key or ''}".encode()).hexdigest()[:32]


def auth_changed(*, user_id: int, ended_session_key: str | None = None) -> None:
    """Tell `user_id`'s open sockets to check their sign-in again; the one on
    `ended_session_key` (signed out just now) closes without checking. Told once the
    change is committed: a socket told inside the transaction (the admin saves in one)
    read the sign-in as it was, and stayed open."""
    event: dict[str, Any] = {"type": "auth.changed"}
    if ended_session_key:
        event["ended"] = session_fingerprint(ended_session_key)
    transaction.on_commit(lambda: broadcast_group_soon(auth_group(user_id), event))


def socket_signed_in(*, user_id: int, tenant_slug: str, qor_slug: str, session_key: str | None,
                     token: str | None) -> bool:
    """Whether a socket opened by `user_id` — with the Django session `session_key`, or the
    API token `token` — may still follow this chat. Reads the session store afresh, as a
    new request would, without changing it."""
    if token:
        found = api_token_authenticate(raw=token)
        if found is None or found.user_id != user_id:
            return False
        user = found.user
    else:
        user = get_user_model().objects.filter(pk=user_id).first()
        if user is None or not session_key or not _session_holds(session_key, user):
            return False
    if not user.is_active:
        return False
    try:
        chat_owner(user=user, tenant_slug=tenant_slug, qor_slug=qor_slug)
    except NotFound:
        return False
    return True


def _session_holds(session_key: str, user: Any) -> bool:
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    data = store.load()  # {} for a session that was flushed, deleted or has expired
    if str(data.get(SESSION_KEY, "")) != str(user.pk) or BACKEND_SESSION_KEY not in data:
        return False
    stored = data.get(HASH_SESSION_KEY) or ""
    if not hasattr(user, "get_session_auth_hash"):
        return True
    if constant_time_compare(stored, user.get_session_auth_hash()):
        return True
    # Sessions signed with a rotated-out SECRET_KEY stay valid, as Django's get_user allows.
    fallbacks = getattr(user, "get_session_auth_fallback_hash", None)
    return bool(fallbacks) and any(constant_time_compare(stored, h) for h in fallbacks())


# --- what tells the sockets ---

def on_logged_out(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    if user is not None and user.pk is not None:
        key = getattr(getattr(request, "session", None), "session_key", None)
        auth_changed(user_id=user.pk, ended_session_key=key)


def on_user_saved(sender: Any, instance: Any, created: bool = False, update_fields: Any = None,
                  **kwargs: Any) -> None:
    # Only what can end a sign-in: a password, the active flag (a login's last_login is not).
    if created or (update_fields is not None and not {"password", "is_active"} & set(update_fields)):
        return
    auth_changed(user_id=instance.pk)


def on_user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    auth_changed(user_id=instance.pk)


def on_membership_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    auth_changed(user_id=instance.user_id)


def on_tenant_suspension_changed(sender: Any, tenant: Any, **kwargs: Any) -> None:
    # Suspended: every member's socket and every webchat visitor's closes (resumed: none is
    # open to tell). Sent once the change is stored, so the sockets' check reads it.
    from tenancy.models import Membership

    def tell() -> None:
        for user_id in Membership.objects.filter(tenant=tenant).values_list("user_id", flat=True):
            auth_changed(user_id=user_id)
        broadcast_group_soon(webchat_auth_group(tenant.pk), {"type": "auth.changed"})

    transaction.on_commit(tell)


def on_token_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    auth_changed(user_id=instance.user_id)


def on_identity_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    # A webchat visitor denied (or unlinked) in the admin.
    if instance.user_id is not None:
        auth_changed(user_id=instance.user_id)


def on_webchat_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    # An embed's binding disabled or deleted, the workspace's webchat switch turned off.
    if getattr(instance, "kind", "") in ("webchat", "channel"):
        group = webchat_auth_group(instance.tenant_id)  # once stored, as auth_changed
        transaction.on_commit(lambda: broadcast_group_soon(group, {"type": "auth.changed"}))
