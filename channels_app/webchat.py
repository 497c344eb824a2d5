"""The webchat embed's visitors.

A tenant's site identifies its signed-in visitor with a token it signs with the webchat
binding's secret:

    token   = f"{user_id}:{expires}:{signature}"
    message = f"{user_id}:{expires}"          # expires: Unix seconds, UTC
    signature = hex(HMAC-SHA256(key=secret, msg=message))

`user_id` is the Qorven username of a member of the binding's tenant; the visitor's
messages go to that user's canonical chat with the binding's Qor, on channel `webchat`.
A token that is expired, expires too far ahead (QORVEN_WEBCHAT_MAX_TTL), is not signed
with this binding's secret or names someone who is not a member is refused.

A visitor without a token gets an anonymous chat of their own on their first message: a
user with no password and no membership (so no other way in), linked through a webchat
Identity, and an `anon.…` token signed by Qorven that the embed keeps in the browser.
Anonymous visitors have public trust. Until the embed holds that token it names the visitor
it starts with a secret of its own, so a first message sent again finds the same visitor
(NEW_VISITOR_REUSE).

An embed is open to the whole web, so new anonymous visitors are limited per client
address and messages per visitor (QORVEN_WEBCHAT_NEW_VISITOR_RATE / _MESSAGE_RATE),
counted with django-ratelimit in the cache before anything is stored.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django_ratelimit.core import get_usage

from tenancy.access import surface_access_of_role, tenant_serving
from tenancy.selectors import user_role_get
from tenancy.switches import channel_enabled
from tenancy.trust import Trust

from .adapters.base import same_secret
from .chat import ChatOwner
from .models import ChannelBinding, Identity

ANON_PREFIX = "anon."
_ANON_SALT = "qorven.webchat.anonymous-visitor"
# A new visitor's frame names the visitor it starts with a secret of its own (sent until it
# holds our token): a first message sent again after a 503 that came once it was stored
# lands with the same visitor. The secret finds only a visitor it started, on the same
# webchat, this soon after (the frame's tries take two or three minutes at most); it is
# kept as a keyed hash, never as it came.
_NEW_SALT = "qorven.webchat.new-visitor"
NEW_VISITOR_REUSE = 600  # seconds
NEW_VISITOR_SECRET = re.compile(r"[A-Za-z0-9_-]{32,128}")  # 128 bits at least, as the frame makes it


class WebchatRefused(Exception):
    def __init__(self, status: int, reason: str, *, retry_after: int | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.retry_after = retry_after  # seconds, for a 429


@dataclass(frozen=True)
class Visitor:
    owner: ChatOwner
    token: str  # what the embed sends from now on
    anonymous: bool


def webchat_token_sign(*, secret: str, user_id: str, expires: int) -> str:
    """Make a visitor token (what a tenant's site does; here for tests and the docs)."""
    message = f"{user_id}:{expires}"
    return f"{message}:{hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()}"


def webchat_token_verify(*, secret: str, token: str, now: float | None = None) -> str:
    """The user id a site token vouches for. Raises WebchatRefused."""
    try:
        user_id, expires_raw, signature = token.rsplit(":", 2)
        expires = int(expires_raw)
    except ValueError:
        raise WebchatRefused(403, "malformed visitor token") from None
    expected = hmac.new(secret.encode(), f"{user_id}:{expires_raw}".encode(), hashlib.sha256).hexdigest()
    if not secret or not same_secret(expected, signature.lower()):
        raise WebchatRefused(403, "bad visitor token signature")
    now = time.time() if now is None else now
    if expires < now:
        raise WebchatRefused(403, "the visitor token has expired")
    # Compared, not subtracted: an expiry of hundreds of digits is no float (OverflowError).
    if expires > now + settings.QORVEN_WEBCHAT_MAX_TTL:
        raise WebchatRefused(403, "the visitor token expires too far in the future")
    if not user_id:
        raise WebchatRefused(403, "the visitor token names no user")
    return user_id


def webchat_limit_new_visitor(request: HttpRequest, *, public_key: str) -> None:
    """Count one new anonymous visitor from the request's client address on this webchat.
    Raises WebchatRefused (429) past QORVEN_WEBCHAT_NEW_VISITOR_RATE."""
    _limit(request, group=f"webchat.new-visitor.{public_key}", key="ip",
           rate=settings.QORVEN_WEBCHAT_NEW_VISITOR_RATE, what="new chats from your address")


def webchat_limit_message(request: HttpRequest, *, public_key: str, visitor: Visitor) -> None:
    """Count one message of `visitor` on this webchat. Raises WebchatRefused (429) past
    QORVEN_WEBCHAT_MESSAGE_RATE."""
    user_id = visitor.owner.user.pk
    _limit(request, group=f"webchat.message.{public_key}", key=lambda group, request: f"user:{user_id}",
           rate=settings.QORVEN_WEBCHAT_MESSAGE_RATE, what="messages")


def _limit(request: HttpRequest, *, group: str, key: object, rate: str, what: str) -> None:
    usage = get_usage(request, group=group, key=key, rate=rate, increment=True)
    if usage is not None and usage["should_limit"]:
        wait = max(1, int(usage["time_left"]))
        raise WebchatRefused(429, f"Too many {what} at once: try again in {wait} second{'' if wait == 1 else 's'}.",
                             retry_after=wait)


def webchat_binding(*, public_key: str) -> ChannelBinding:
    binding = (
        ChannelBinding.objects.select_related("tenant", "qor")
        .filter(kind=ChannelBinding.Kind.WEBCHAT, lookup_key=public_key, enabled=True)
        .first()
    )
    # A suspended workspace's embed is as one switched off: its anonymous visitors have no
    # membership for tenancy.access to refuse.
    if (binding is None or not tenant_serving(binding.tenant)
            or not channel_enabled(tenant=binding.tenant, channel="webchat")):
        raise WebchatRefused(404, "no such webchat")
    return binding


def webchat_visitor(*, public_key: str, token: str, create: bool, new_visitor: str = "",
                    before_new: Callable[[], None] = lambda: None) -> Visitor | None:
    """Who is writing through the embed. A signed site token names a member; an `anon.`
    token names an anonymous visitor made earlier; no token makes a new anonymous visitor
    when `create` (their first message), else None: the one `new_visitor` (the frame's
    secret for it) started within NEW_VISITOR_REUSE, if any, else a new one, `before_new`
    called first (it may refuse). Raises WebchatRefused."""
    binding = webchat_binding(public_key=public_key)
    if token.startswith(ANON_PREFIX):
        return _anonymous(binding, token)
    if token:
        return _signed(binding, token)
    if not create:
        return None
    visitor_id = _chosen_id(binding, new_visitor)
    if visitor_id is not None:
        started = _started(binding, visitor_id)
        if started is not None:
            return started
    before_new()
    try:
        return _new_anonymous(binding, visitor_id or f"anon:{uuid.uuid4().hex}")
    except IntegrityError:
        # The same first message sent again while the first was under way: its visitor. Or
        # a secret whose visitor is past NEW_VISITOR_REUSE: a visitor of its own, as without.
        started = _started(binding, visitor_id) if visitor_id is not None else None
        return started or _new_anonymous(binding, f"anon:{uuid.uuid4().hex}")


def _chosen_id(binding: ChannelBinding, secret: str) -> str | None:
    """The visitor id a frame's secret stands for on this webchat (None: no usable secret)."""
    if not NEW_VISITOR_SECRET.fullmatch(secret):
        return None
    return "anon:" + salted_hmac(_NEW_SALT, f"{binding.pk}:{secret}", algorithm="sha256").hexdigest()[:32]


def _started(binding: ChannelBinding, visitor_id: str) -> Visitor | None:
    """The anonymous visitor `visitor_id` names, made within NEW_VISITOR_REUSE, or None."""
    identity = (
        Identity.objects.select_related("user")
        .filter(tenant=binding.tenant, channel="webchat", external_id=visitor_id, user__isnull=False,
                created_at__gte=timezone.now() - timedelta(seconds=NEW_VISITOR_REUSE))
        .exclude(approval=Identity.Approval.DENIED)
        .first()
    )
    if identity is None:
        return None
    return _anonymous_visitor(binding, identity)


def _signed(binding: ChannelBinding, token: str) -> Visitor:
    username = webchat_token_verify(secret=str(binding.credentials.get("secret", "")), token=token)
    user, role = user_role_get(tenant=binding.tenant, username=username)  # with the membership: one statement
    trust = surface_access_of_role(user=user, role=role, surface="webchat")  # an embed: at most trusted
    if user is None or trust is None:
        raise WebchatRefused(403, "the visitor token names no member of this workspace")
    return Visitor(ChatOwner(binding.tenant, binding.qor, user, trust, surface="webchat"), token, anonymous=False)


def _anonymous(binding: ChannelBinding, token: str) -> Visitor:
    try:
        data = signing.loads(token[len(ANON_PREFIX):], salt=_ANON_SALT, max_age=settings.QORVEN_WEBCHAT_VISITOR_TTL)
    except signing.SignatureExpired:
        raise WebchatRefused(403, "the visitor token has expired; start a new chat") from None
    except signing.BadSignature:
        raise WebchatRefused(403, "bad visitor token signature") from None
    if not isinstance(data, dict) or data.get("b") != binding.pk:
        raise WebchatRefused(403, "the visitor token is for another webchat")
    identity = (
        Identity.objects.select_related("user")
        .filter(tenant=binding.tenant, channel="webchat", external_id=data.get("v", ""), user__isnull=False)
        .first()
    )
    if identity is None or identity.approval == Identity.Approval.DENIED:
        raise WebchatRefused(403, "unknown visitor")
    return _anonymous_visitor(binding, identity)


def _anonymous_visitor(binding: ChannelBinding, identity: Identity) -> Visitor:
    """The anonymous visitor of `identity`, with a fresh token of ours for it."""
    token = ANON_PREFIX + signing.dumps({"b": binding.pk, "v": identity.external_id}, salt=_ANON_SALT)
    return Visitor(ChatOwner(binding.tenant, binding.qor, identity.user, Trust.PUBLIC, member=False, surface="webchat"),
                   token, anonymous=True)


@transaction.atomic
def _new_anonymous(binding: ChannelBinding, visitor_id: str) -> Visitor:
    user = get_user_model()(username=f"webchat-{uuid.uuid4().hex[:16]}", first_name="Visitor")
    user.set_unusable_password()
    user.save()
    identity = Identity.objects.create(
        tenant=binding.tenant, channel="webchat", external_id=visitor_id, user=user, display_name="Visitor",
        trust_level=Trust.PUBLIC, approval=Identity.Approval.APPROVED,
    )
    return _anonymous_visitor(binding, identity)
