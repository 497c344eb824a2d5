"""Writes of tenancy data: bootstrap a tenant, suspend and resume it, mint API tokens,
remove members."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Field, QuerySet
from django.utils import timezone
from django.utils.text import slugify

from .errors import InactiveUser, NotFound
from .models import ApiToken, Membership, Qor, Tenant
from .selectors import membership_get, token_digest
from .signals import tenant_suspension_changed


@dataclass(frozen=True)
class BootstrapResult:
    tenant: Tenant
    qor: Qor
    owner: User
    created: dict[str, bool]


def tenant_bootstrap_refusal(*, tenant_slug: str, qor_slug: str, owner_username: str,
                             password: str | None, tenant_name: str = "", qor_name: str = "") -> str | None:
    """What `tenant_bootstrap` would refuse in these arguments, named by the flag that gave
    it (`--tenant`, `--qor`, `--owner`, `--password`, `--tenant-name`, `--qor-name`); None
    when it would take them. Asked before anything is written, so that `qorven setup` stops
    whole, not half done."""
    for flag, slug in (("--tenant", tenant_slug), ("--qor", qor_slug)):
        if not slug or slugify(slug) != slug:  # slugify("") is "" too
            example = f", e.g. {slugify(slug)!r}" if slugify(slug) else ""
            return (f"{flag} must be a slug (lower-case letters a-z, digits, hyphens, underscores), "
                    f"got {slug!r}{example}")
    # SQLite keeps any length in a column; PostgreSQL refuses it with a DataError.
    for flag, value, model, field in (("--tenant", tenant_slug, Tenant, "slug"), ("--qor", qor_slug, Qor, "slug"),
                                      ("--tenant-name", tenant_name, Tenant, "name"),
                                      ("--qor-name", qor_name, Qor, "name")):
        column = model._meta.get_field(field)
        longest = column.max_length if isinstance(column, Field) else None
        if longest is not None and len(value) > longest:
            return f"{flag} is at most {longest} characters, got {len(value)}"
    if not owner_username:  # the username validators take "" (the field's blank check is the form's)
        return "--owner: a username is needed, e.g. alice"
    User = get_user_model()
    try:
        username = User._meta.get_field(User.USERNAME_FIELD)
        if isinstance(username, Field):
            username.run_validators(owner_username)
    except ValidationError as exc:
        return "--owner: " + " ".join(exc.messages)
    try:
        if password:
            validate_password(password, user=User(username=owner_username))
    except ValidationError as exc:
        return "--password: " + " ".join(exc.messages)
    return None


@transaction.atomic
def tenant_bootstrap(
    *,
    tenant_slug: str,
    qor_slug: str,
    owner_username: str,
    password: str | None = None,
    tenant_name: str = "",
    qor_name: str = "",
    host_superuser: bool = False,
) -> BootstrapResult:
    """Create or update a tenant, its default Qor and its owner. Safe to run again.

    The owner is staff: in the admin they administer their own tenant's rows and nothing
    else. Only with `host_superuser` are they made a superuser, who sees every tenant (the
    host's own account). A password is set only when given (and must pass the password
    validators), so re-running without one never locks anybody out.
    """
    User = get_user_model()
    username = User._meta.get_field(User.USERNAME_FIELD)
    if isinstance(username, Field):
        username.run_validators(owner_username)  # as the admin would check it
    if password:
        validate_password(password, user=User(username=owner_username))
    tenant, tenant_created = Tenant.objects.get_or_create(
        slug=tenant_slug, defaults={"name": tenant_name or tenant_slug.replace("-", " ").title()}
    )
    if tenant_name and tenant.name != tenant_name:
        tenant.name = tenant_name
        tenant.save(update_fields=["name", "updated_at"])

    qor, qor_created = Qor.objects.get_or_create(
        tenant=tenant, slug=qor_slug, defaults={"name": qor_name or qor_slug.replace("-", " ").title()}
    )
    if not qor.is_default:
        Qor.objects.filter(tenant=tenant, is_default=True).exclude(pk=qor.pk).update(is_default=False)
        qor.is_default = True
        qor.save(update_fields=["is_default", "updated_at"])

    owner, owner_created = User.objects.get_or_create(username=owner_username)
    fields = []
    if not owner.is_staff:
        owner.is_staff = True
        fields.append("is_staff")
    if host_superuser and not owner.is_superuser:
        owner.is_superuser = True
        fields.append("is_superuser")
    if password and not owner.check_password(password):
        # Only a new password is set: hashing the same one again would change the session
        # hash and sign the owner out of every open page (`make run` passes it each start).
        owner.set_password(password)
        fields.append("password")
    elif owner_created:
        owner.set_unusable_password()
        fields.append("password")
    if fields:
        owner.save(update_fields=fields)

    membership, membership_created = Membership.objects.get_or_create(
        tenant=tenant, user=owner, defaults={"role": Membership.Role.OWNER}
    )
    if membership.role != Membership.Role.OWNER:
        membership.role = Membership.Role.OWNER
        membership.save(update_fields=["role", "updated_at"])
    return BootstrapResult(
        tenant=tenant,
        qor=qor,
        owner=owner,
        created={"tenant": tenant_created, "qor": qor_created, "owner": owner_created, "membership": membership_created},
    )


def tenant_suspend(*, tenant: Tenant) -> bool:
    """Suspend the workspace (the host's switch, for an unpaid bill say): from now on
    nobody in it is served on any surface (tenancy.access) and its beats do not run;
    nothing of it is deleted or changed, and what platforms send meanwhile is kept
    unanswered. Open chat sockets are told to check their sign-in (they close). False when
    it was suspended already (its first suspension time stays)."""
    return _suspended_set(tenant=tenant, at=timezone.now())


def tenant_resume(*, tenant: Tenant) -> bool:
    """Serve the suspended workspace again, everything as it was (messages kept while it
    was suspended stay unanswered). False when it was not suspended."""
    return _suspended_set(tenant=tenant, at=None)


def _suspended_set(*, tenant: Tenant, at: datetime | None) -> bool:
    # One conditional UPDATE: two hosts suspending at once change it once.
    changed = Tenant.objects.filter(pk=tenant.pk, suspended_at__isnull=at is not None).update(suspended_at=at)
    tenant.refresh_from_db(fields=["suspended_at"])
    if changed:
        tenant_suspension_changed.send(sender=Tenant, tenant=tenant)
    return bool(changed)


@transaction.atomic
def api_token_create(*, tenant: Tenant, user: User, name: str = "",
                     expires_at: datetime | None = None) -> tuple[ApiToken, str]:
    """Mint a bearer token for a member of `tenant`, working until `expires_at` (None:
    until revoked). Returns the row and the raw token, which is shown once and stored
    only as a digest. Raises NotFound for a user who is not a member, InactiveUser for a
    deactivated account (its token would be refused at every use)."""
    membership_get(tenant=tenant, user=user)
    if not user.is_active:
        raise InactiveUser(user.get_username())
    raw = "qv_" + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(tenant=tenant, user=user, name=name, prefix=raw[:10], digest=token_digest(raw),
                                    expires_at=expires_at)
    return token, raw


@transaction.atomic
def api_tokens_revoke(*, tokens: QuerySet[ApiToken]) -> int:
    """Revoke those of `tokens` still live; returns how many. Each is saved, not updated in
    bulk: its save tells the sockets it opened to check their sign-in and close
    (channels_app.live_auth), rather than at their holder's next ping."""
    now = timezone.now()
    live = list(tokens.filter(revoked_at__isnull=True))
    for token in live:
        token.revoked_at = now
        token.save(update_fields=["revoked_at"])
    return len(live)


@transaction.atomic
def memberships_remove(*, memberships: QuerySet[Membership]) -> int:
    """Remove people from workspaces; returns how many memberships went. Each one's API
    tokens for that workspace are revoked with it: a token is checked only against a
    membership now, so one kept from before would work again the day its holder is let
    back in (they get a new one then). Each row is deleted on its own, and each token
    saved: what closes their open sockets is told (channels_app.live_auth)."""
    removed = 0
    for membership in memberships.select_for_update().order_by("pk"):
        api_tokens_revoke(tokens=ApiToken.objects.filter(tenant_id=membership.tenant_id, user_id=membership.user_id))
        membership.delete()
        removed += 1
    return removed


def usage_record(
    *, tenant: Tenant, qor: Qor, role: str, prompt_tokens: int, completion_tokens: int, route: str = ""
) -> None:
    """Add one model call's tokens to today's row for (tenant, qor, role, route): one
    INSERT … ON CONFLICT DO UPDATE (PostgreSQL and SQLite alike), so concurrent calls add
    up without a transaction or a retry."""
    from django.db import connection
    from django.utils import timezone

    from .models import Usage

    table = connection.ops.quote_name(Usage._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (tenant_id, qor_id, role, route, day, calls, prompt_tokens, completion_tokens) "
            "VALUES (%s, %s, %s, %s, %s, 1, %s, %s) "
            "ON CONFLICT (tenant_id, qor_id, role, route, day) DO UPDATE SET "
            f"calls = {table}.calls + 1, prompt_tokens = {table}.prompt_tokens + excluded.prompt_tokens, "
            f"completion_tokens = {table}.completion_tokens + excluded.completion_tokens",
            [tenant.pk, qor.pk, role, route, timezone.localdate(), prompt_tokens, completion_tokens],
        )


@dataclass(frozen=True)
class Retimed:
    zone: str  # the person's own, "" for the workspace's
    beats_moved: int  # their heartbeats now scheduled in the new zone


@transaction.atomic
def membership_timezone_set(*, tenant: Tenant, user: User, timezone: str) -> Retimed:
    """Set the person's own timezone in the workspace ("" = follow the workspace's) and move
    their heartbeats that follow it. Raises NotFound for a non-member and
    django.core.exceptions.ValidationError for a name this machine does not know."""
    from .models import validate_timezone
    from .signals import person_retimed

    membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    if membership is None:
        raise NotFound("not a member of this tenant")
    timezone = timezone.strip()
    if timezone:
        validate_timezone(timezone)
    if membership.timezone == timezone:
        return Retimed(zone=timezone, beats_moved=0)
    membership.timezone = timezone
    membership.save(update_fields=["timezone", "updated_at"])
    answers: list[tuple[object, object]] = list(person_retimed.send(sender=Membership, tenant=tenant, user=user))
    moved = [n for _, n in answers if isinstance(n, int)]
    return Retimed(zone=timezone, beats_moved=sum(moved))
