"""The heartbeats defaults file: config-owned ("managed") beats, synced into the table.

Format (JSON; the path is QORVEN_HEARTBEATS_FILE, by default heartbeats.default.json at
the project root)::

    {
      "beats": [
        {"tenant": "*", "name": "__qorven_clear_images__", "cron": "30 3 * * *"},
        {"tenant": "acme", "qor": "aria", "name": "morning-brief", "cron": "0 8 * * 1-5",
         "timezone": "Europe/Paris", "prompt": "Anything on my plate today?",
         "deliver": {"user": "alice", "channel": "telegram"}, "enabled": true}
      ]
    }

- `tenant`: a tenant slug, or "*" for every tenant (tenants lacking the Qor, or the
  delivery user, are skipped).
- `qor`: a Qor slug; omitted, the tenant's default Qor.
- `name`, `cron` (five fields or @daily…), `prompt` (needed unless the name is a reserved
  system beat), `timezone` (omitted: the tenant's), `deliver` (a member's username and a
  chat channel; omitted: the result is only recorded), `enabled` (default true).

A sync makes the table match the file: beats in the file are created or updated and marked
managed, managed beats no longer in the file are deleted, and beats made by users (tools,
admin) are never touched. The file is validated as a whole first: any problem is reported
with its line and field, and nothing changes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from pydantic import ValidationError

from qorven.runtime.json_errors import json_problem
from tenancy.models import Membership, Qor, Tenant

from ..errors import HeartbeatInvalid
from ..models import RESERVED_NAMES, Heartbeat
from ..selectors import heartbeat_name_taken
from ..services import (
    heartbeat_create,
    heartbeat_delete,
    heartbeat_update,
    periodic_task_orphans_delete,
)
from .reading import (
    BeatSpec,
    DefaultsFile,
    DefaultsFileError,
    DeliverSpec,
    Problem,
    _DuplicateKey,
    _load_located,
    _loc_text,
    _plain,
    _position,
)

# ---- problems and plans -------------------------------------------------------------------------

@dataclass
class Desired:
    spec: BeatSpec
    tenant: Tenant
    qor: Qor
    deliver_to: Any  # a user or None
    line: int
    loc: str


@dataclass
class SyncPlan:
    path: Path
    create: list[Desired] = field(default_factory=list)
    update: list[tuple[Heartbeat, Desired, dict[str, tuple[Any, Any]]]] = field(default_factory=list)
    delete: list[Heartbeat] = field(default_factory=list)
    unchanged: list[Heartbeat] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return len(self.create) + len(self.update) + len(self.delete)

    def lines(self) -> list[str]:
        out = [f"create  {_label(d.tenant, d.qor, d.spec.name)}  ({d.spec.cron})" for d in self.create]
        for beat, d, diff in self.update:
            what = ", ".join(f"{k}: {_short(old)} -> {_short(new)}" for k, (old, new) in diff.items())
            out.append(f"update  {_label(d.tenant, d.qor, beat.name)}  {what}")
        out += [f"delete  {_label(b.tenant, b.qor, b.name)}  (no longer in the file)" for b in self.delete]
        out += [f"note    {n}" for n in self.notes]
        return out


def _label(tenant: Tenant, qor: Qor, name: str) -> str:
    return f"{tenant.slug}/{qor.slug} {name}"


def _short(value: Any) -> str:
    text = str(getattr(value, "username", value))
    return repr(text if len(text) <= 40 else text[:37] + "...")


# ---- the sync ------------------------------------------------------------------------------------

def defaults_path() -> Path:
    return Path(settings.QORVEN_HEARTBEATS_FILE)


def beats_plan(*, path: Path | None = None) -> SyncPlan:
    """Read and check the file and work out what a sync would change. Raises
    DefaultsFileError with every problem found (and changes nothing)."""
    path = Path(path or defaults_path())
    if path.is_dir():
        raise DefaultsFileError(path, [Problem(0, "", "is a folder: name the JSON file of beats in it")])
    if not path.is_file():
        # Not "no managed beats": a mistyped path would delete them all. A file saying
        # {"beats": []} does that, on purpose.
        raise DefaultsFileError(path, [Problem(0, "", 'no such file (a file of {"beats": []} manages no beats)')])
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # a binary file named by mistake: reported like any bad file
        raise DefaultsFileError(path, [Problem(0, "", "not UTF-8 text (a JSON file is expected)")]) from None
    try:
        raw = _load_located(text)
    except _DuplicateKey as exc:
        raise DefaultsFileError(path, [Problem(_line(text, exc.pos), "", str(exc))]) from None
    except json.JSONDecodeError as exc:
        raise DefaultsFileError(path, [Problem(exc.lineno, "", f"invalid JSON: {json_problem(exc)}", exc.colno)]) from None
    if isinstance(raw, list):
        raw = {"beats": raw}  # a bare list of beats is accepted too
    try:
        parsed = DefaultsFile.model_validate(_plain(raw))
    except ValidationError as exc:
        problems = _problems(text, raw, exc)
        items = raw.get("beats") if isinstance(raw, dict) else None
        if not isinstance(items, list):
            raise DefaultsFileError(path, problems) from None
        # The beats that are well formed are checked against the database all the same,
        # so one run reports every problem of the file, not the next ones after a fix.
        beats = []
        for index, item in enumerate(items):
            try:
                beats.append((index, BeatSpec.model_validate(_plain(item))))
            except ValidationError:
                continue
        _plan(path, text, raw, beats, problems)
        raise DefaultsFileError(path, problems) from None  # _plan raises first when it found more
    return _plan(path, text, raw, list(enumerate(parsed.beats)), [])


def _problems(text: str, raw: Any, exc: ValidationError) -> list[Problem]:
    return [Problem(_line(text, _position(raw, tuple(err["loc"]))), _loc_text(tuple(err["loc"])), _message(err))
            for err in exc.errors()]


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":  # a misspelt key: say which keys there are
        loc = tuple(err["loc"])
        model, what = ((DefaultsFile, "the file") if len(loc) == 1 else
                       (DeliverSpec, "a beat's deliver") if len(loc) > 3 and loc[-2] == "deliver" else
                       (BeatSpec, "a beat"))
        return f"not a key of {what} (its keys: {', '.join(model.model_fields)})"
    message = str(err["msg"])
    return message.removeprefix("Value error, ")


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _plan(path: Path, text: str, raw: Any, beats: list[tuple[int, BeatSpec]], problems: list[Problem]) -> SyncPlan:
    """What a sync of `beats` (each with its index in the file) changes; raises
    DefaultsFileError with `problems` (those found before) and any found here."""
    plan = SyncPlan(path=path)
    desired: dict[tuple[int, int, str], Desired] = {}
    User = get_user_model()
    all_tenants = list(Tenant.objects.order_by("slug"))
    for index, spec in beats:
        loc = ("beats", index)
        line = _line(text, _position(raw, loc))

        def problem(key: str, message: str, index: int = index) -> None:
            full = ("beats", index, *key.split(".")) if key else ("beats", index)
            problems.append(Problem(_line(text, _position(raw, full)), _loc_text(full), message))

        wildcard = spec.tenant == "*"
        tenants = all_tenants if wildcard else [t for t in all_tenants if t.slug == spec.tenant]
        if not tenants and not wildcard:
            problem("tenant", f"no tenant {spec.tenant!r}")
            continue
        if spec.name.startswith("__qorven_") and spec.name not in RESERVED_NAMES:
            problem("name", f"names starting with '__qorven_' are reserved; known system beats: {', '.join(sorted(RESERVED_NAMES))}")
            continue
        if spec.name not in RESERVED_NAMES and not spec.prompt.strip():
            problem("prompt", "a beat needs a prompt: what should the Qor check or say?")
            continue
        deliver_user = None
        if spec.deliver is not None:
            deliver_user = User.objects.filter(username=spec.deliver.user).first()
            if deliver_user is None:
                problem("deliver.user", f"no user {spec.deliver.user!r}")
                continue
            if not deliver_user.is_active:  # nothing is delivered to a deactivated account
                problem("deliver.user", f"{deliver_user} is deactivated: choose someone active, or no delivery")
                continue
        for tenant in tenants:
            qor = _qor_of(tenant, spec.qor)
            if qor is None:
                if wildcard:
                    plan.notes.append(f"{spec.name}: skipped tenant {tenant.slug} (no {'Qor ' + repr(spec.qor) if spec.qor else 'default Qor'})")
                    continue
                problem("qor" if spec.qor else "tenant",
                        f"no Qor {spec.qor!r} in {tenant.slug}" if spec.qor
                        else f"{tenant.slug} has no default Qor; name one with \"qor\"")
                break
            if deliver_user is not None and not Membership.objects.filter(tenant=tenant, user=deliver_user).exists():
                if wildcard:
                    plan.notes.append(f"{spec.name}: skipped tenant {tenant.slug} ({deliver_user} is not a member)")
                    continue
                problem("deliver.user", f"{deliver_user} is not a member of {tenant.slug}")
                break
            key = (tenant.pk, qor.pk, spec.name)
            if key in desired:
                problem("name", f"{_label(tenant, qor, spec.name)} is also defined at line {desired[key].line}")
                break
            desired[key] = Desired(spec=spec, tenant=tenant, qor=qor, deliver_to=deliver_user, line=line,
                                   loc=_loc_text(loc))
    # The file's beats are named in the config space (no owner); each user's in their own,
    # so a user's beat is never one of the file's, whatever its name.
    tenant_ids = {d.tenant.pk for d in desired.values()}
    existing = {
        (b.tenant_id, b.qor_id, b.name): b
        for b in Heartbeat.objects.select_related("tenant", "qor", "deliver_to").filter(
            tenant_id__in=tenant_ids, owner__isnull=True,
        )
    }
    for key, want in desired.items():
        beat = existing.get(key)
        if beat is not None and not beat.managed:
            problems.append(Problem(want.line, f"{want.loc}.name",
                                    f"{_label(want.tenant, want.qor, want.spec.name)} already exists as a beat made "
                                    "by a user; user beats are never touched, so rename the one in the file"))
            continue
        diff = _diff(beat, want) if beat is not None else {}
        # A new beat, or one given to someone else, is seen by them: a beat of their own may
        # have its name already.
        if (beat is None or "deliver_to" in diff) and heartbeat_name_taken(
                tenant=want.tenant, qor=want.qor, name=want.spec.name, deliver_to=want.deliver_to,
                exclude_id=beat.pk if beat is not None else None):
            problems.append(Problem(want.line, f"{want.loc}.name",
                                    f"{_label(want.tenant, want.qor, want.spec.name)} already exists as a beat made "
                                    "by a user who would see this one; user beats are never touched, so rename the "
                                    "one in the file"))
        elif beat is None:
            plan.create.append(want)
        elif diff:
            plan.update.append((beat, want, diff))
        else:
            plan.unchanged.append(beat)
    if problems:
        raise DefaultsFileError(path, sorted(problems, key=lambda p: (p.line, p.field)))
    _plan_deletions(plan, keep={b.pk for b in plan.unchanged} | {b.pk for b, _, _ in plan.update})
    return plan


def _qor_of(tenant: Tenant, slug: str | None) -> Qor | None:
    qors = Qor.objects.filter(tenant=tenant)
    if slug:
        return qors.filter(slug=slug).first()
    return qors.filter(is_default=True).first()


def _diff(beat: Heartbeat, want: Desired) -> dict[str, tuple[Any, Any]]:
    spec = want.spec
    target = {
        "cron": spec.cron, "timezone": spec.timezone, "prompt": spec.prompt.strip(),
        "deliver_to": want.deliver_to, "deliver_channel": spec.deliver.channel if spec.deliver else "",
        "enabled": spec.enabled,
    }
    return {k: (getattr(beat, k), v) for k, v in target.items() if getattr(beat, k) != v}


def _plan_deletions(plan: SyncPlan, *, keep: set[int]) -> None:
    plan.delete = list(
        Heartbeat.objects.select_related("tenant", "qor").filter(managed=True).exclude(pk__in=keep)
        .order_by("tenant__slug", "qor__slug", "name")
    )


def beats_sync(*, path: Path | None = None, dry_run: bool = False) -> SyncPlan:
    """Make the managed beats match the defaults file (see the module docstring). Returns
    the plan it carried out (or would have, with `dry_run`). Raises DefaultsFileError."""
    if not dry_run:
        periodic_task_orphans_delete()
    for attempt in range(2):
        plan = beats_plan(path=path)
        if dry_run or not plan.changes:
            return plan
        try:
            _apply(plan)
            return plan
        except (IntegrityError, DefaultsFileError):
            if attempt == 1:
                raise
            # Most likely another process (a second web server, beat) synced the same file
            # at the same time and won: plan again against what it committed.
    return plan


@transaction.atomic
def _apply(plan: SyncPlan) -> None:
    problems: list[Problem] = []
    for beat in plan.delete:
        heartbeat_delete(heartbeat=beat, allow_managed=True)
    for beat, want, _diff_ in plan.update:
        try:
            heartbeat_update(
                heartbeat=beat, cron=want.spec.cron, timezone=want.spec.timezone, prompt=want.spec.prompt,
                deliver_to=want.deliver_to, deliver_channel=want.spec.deliver.channel if want.spec.deliver else "",
                enabled=want.spec.enabled, allow_managed=True,
            )
        except HeartbeatInvalid as exc:
            problems.append(Problem(want.line, f"{want.loc}.{exc.field}", exc.message))
    for want in plan.create:
        try:
            heartbeat_create(
                tenant=want.tenant, qor=want.qor, name=want.spec.name, cron=want.spec.cron,
                prompt=want.spec.prompt, timezone=want.spec.timezone, deliver_to=want.deliver_to,
                deliver_channel=want.spec.deliver.channel if want.spec.deliver else "", enabled=want.spec.enabled,
                managed=True,
            )
        except HeartbeatInvalid as exc:
            problems.append(Problem(want.line, f"{want.loc}.{exc.field}", exc.message))
    if problems:  # raising out of the atomic block rolls every change back
        raise DefaultsFileError(plan.path, problems)

