"""Learned skills from files: `plugins/skills/*.md` synced into LearnedSkill.

A skill file is markdown with front matter::

    ---
    name: daily-briefing
    description: Put together a short morning briefing.
    min_trust: paired
    triggers: what's on today? | /(morning )?briefing/
    reply: Here is your day: {result[iso]}
    action: current_time
    action_args: {"timezone": "Europe/Paris"}
    ---
    Step-by-step instructions for the model…

`triggers`, `reply`, `action` and `action_args` are optional: with triggers, the skill
router (qorven.agent.router) answers a matching message itself, without the model.
Triggers are separated by ` | `; one between slashes is a regular expression matched
against the whole message, any other is a phrase matched ignoring case, spacing and
end punctuation. `reply` is a template: `{message}` (the person's words), `{name}`,
`{time}` (the tenant's local time) and, with an `action` (a tool run with `action_args`,
a JSON object), `{result}` (its JSON answer; `{result[key]}` for one field).

Synced rows are shared by every tenant (tenant empty) and marked `source=file`: a new
file adds a skill, a changed file (by SHA-256 checksum) updates it, a file that goes
disables it (the row stays, so re-adding the file brings it back). Skills made in the
admin are never touched, and a file never overrides an admin skill of the same name.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import regex
from django.conf import settings
from django.db import transaction

from tenancy.trust import Trust

from .models import LearnedSkill

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")
_FIELDS = {"name", "description", "min_trust", "triggers", "reply", "action", "action_args"}


class SkillFileError(ValueError):
    """A skill file that cannot be read as a skill; the message says why."""


@dataclass(frozen=True)
class SkillFile:
    path: str  # relative to the skills directory
    name: str
    description: str
    min_trust: str
    body: str
    checksum: str
    triggers: list[str] = field(default_factory=list)
    reply: str = ""
    action: str = ""
    action_args: dict = field(default_factory=dict)

    def router_fields(self) -> dict:
        return {"triggers": self.triggers, "reply": self.reply, "action": self.action, "action_args": self.action_args}


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "file: why"
    directory: str = ""
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.disabled)

    def summary(self) -> str:
        verb = "would be" if self.dry_run else ""
        parts = [f"{len(self.added)} added", f"{len(self.updated)} updated", f"{len(self.disabled)} disabled",
                 f"{len(self.unchanged)} unchanged"]
        text = f"Skills from {self.directory}: " + ", ".join(parts)
        if verb:
            text += " (dry run: nothing written)"
        if self.errors:
            text += f"; {len(self.errors)} file(s) skipped"
        return text


def skills_dir() -> Path:
    return Path(settings.QORVEN_SKILLS_DIR)


def skill_file_parse(path: Path, *, root: Path) -> SkillFile:
    """Read one skill file. Raises SkillFileError."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillFileError("not UTF-8 text") from None
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillFileError("no front matter (the file must start with a '---' line)")
    try:
        end = next(i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---")
    except StopIteration:
        raise SkillFileError("the front matter is not closed with a '---' line") from None
    meta: dict[str, str] = {}
    for number, line in enumerate(lines[1:end], start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if not sep or key not in _FIELDS:
            raise SkillFileError(f"line {number}: expected one of {', '.join(sorted(_FIELDS))} as 'key: value'")
        meta[key] = value.strip().strip("'\"").strip()
    name = meta.get("name", "")
    if not _NAME.match(name):
        raise SkillFileError("name must be 1-100 lowercase letters, digits, '-' or '_'")
    description = meta.get("description", "")
    if not description or len(description) > 500:
        raise SkillFileError("description is required (at most 500 characters)")
    min_trust = meta.get("min_trust", Trust.PAIRED).lower()
    if min_trust not in Trust.values:
        raise SkillFileError(f"min_trust must be one of {', '.join(Trust.values)}")
    body = "\n".join(lines[end + 1 :]).strip()
    if not body:
        raise SkillFileError("the body (the instructions) is empty")
    triggers, reply, action, action_args = _router_fields(meta)
    return SkillFile(
        path=str(path.relative_to(root)), name=name, description=description, min_trust=min_trust, body=body,
        checksum=hashlib.sha256(raw).hexdigest(), triggers=triggers, reply=reply, action=action,
        action_args=action_args,
    )


def _router_fields(meta: dict[str, str]) -> tuple[list[str], str, str, dict]:
    triggers = [t.strip() for t in meta.get("triggers", "").split(" | ") if t.strip()]
    try:
        action_args = json.loads(meta.get("action_args") or "{}")
    except json.JSONDecodeError as exc:
        raise SkillFileError(f"action_args is not JSON ({exc.msg})") from None
    reply, action = meta.get("reply", ""), meta.get("action", "")
    router_fields_check(triggers=triggers, reply=reply, action=action, action_args=action_args)
    return triggers, reply, action, action_args


def router_fields_check(*, triggers: object, reply: str, action: str, action_args: object) -> None:
    """What the skill router needs of a skill, whether from a file or the admin. Raises
    SkillFileError saying what is wrong."""
    from tenancy.tool_registry import registry

    if not isinstance(triggers, list) or not all(isinstance(t, str) and t.strip() for t in triggers):
        raise SkillFileError("triggers must be a list of phrases or /regular expressions/")
    for trigger in triggers:
        if len(trigger) > 2 and trigger.startswith("/") and trigger.endswith("/"):
            try:
                regex.compile(trigger[1:-1])  # as qorven.agent.router matches it
            except regex.error as exc:
                raise SkillFileError(f"trigger {trigger!r} is not a valid regular expression ({exc})") from None
    if action and action not in registry.tools:
        raise SkillFileError(f"action {action!r} is not a tool")
    if not isinstance(action_args, dict):
        raise SkillFileError("action_args must be a JSON object")
    if triggers and not reply:
        raise SkillFileError("a skill with triggers needs a reply (a template; `{result}` for its action's answer)")
    if (reply or action) and not triggers:
        raise SkillFileError("reply and action answer a trigger: give `triggers` too")


def skills_sync(*, directory: Path | None = None, dry_run: bool = False) -> SyncReport:
    """Bring the shared file skills in line with the `*.md` files of `directory`
    (QORVEN_SKILLS_DIR by default). A file that cannot be parsed is reported and left
    out; the skill it held before keeps its last good version. A folder that is not there
    raises SkillFileError and changes nothing."""
    root = (directory or skills_dir()).resolve()
    if not root.is_dir():
        # Not "every skill removed": a mistyped folder would disable them all. An empty
        # folder does that, on purpose.
        if root.exists():
            raise SkillFileError(f"{root}: not a folder but a file; name the skills folder (the one holding "
                                 "the *.md files)")
        raise SkillFileError(f"{root}: no such folder (an empty folder disables every file skill)")
    report = SyncReport(directory=str(root), dry_run=dry_run)
    files: dict[str, SkillFile] = {}
    broken_paths: set[str] = set()
    for path in sorted(root.glob("*.md")):
        try:
            skill = skill_file_parse(path, root=root)
        except (SkillFileError, OSError) as exc:
            report.errors.append(f"{path.name}: {exc}")
            broken_paths.add(path.name)
            continue
        if skill.name in files:
            report.errors.append(f"{path.name}: the name {skill.name!r} is already used by {files[skill.name].path}")
            continue
        files[skill.name] = skill
    with transaction.atomic():
        shared = {s.name: s for s in LearnedSkill.objects.select_for_update().filter(tenant__isnull=True)}
        for name, skill in files.items():
            row = shared.get(name)
            if row is None:
                report.added.append(name)
                if not dry_run:
                    LearnedSkill.objects.create(
                        tenant=None, name=name, description=skill.description, body=skill.body,
                        min_trust=skill.min_trust, source=LearnedSkill.Source.FILE, path=skill.path,
                        checksum=skill.checksum, enabled=True, **skill.router_fields(),
                    )
            elif row.source != LearnedSkill.Source.FILE:
                report.errors.append(f"{skill.path}: an admin-made skill is named {name!r}; the file is ignored")
            elif row.checksum != skill.checksum or row.path != skill.path or not row.enabled:
                report.updated.append(name)
                if not dry_run:
                    row.description, row.body, row.min_trust = skill.description, skill.body, skill.min_trust
                    row.path, row.checksum, row.enabled = skill.path, skill.checksum, True
                    for key, value in skill.router_fields().items():
                        setattr(row, key, value)
                    row.save(update_fields=["description", "body", "min_trust", "path", "checksum", "enabled",
                                            *skill.router_fields(), "updated_at"])
            else:
                report.unchanged.append(name)
        for name, row in shared.items():
            gone = name not in files and row.path not in broken_paths
            if row.source == LearnedSkill.Source.FILE and row.enabled and gone:
                report.disabled.append(name)
                if not dry_run:
                    row.enabled = False
                    row.save(update_fields=["enabled", "updated_at"])
    return report


def skills_sync_on_startup(stdout: TextIO, stderr: TextIO) -> SyncReport | None:
    """Sync at process start (`qorven serve`, `qorven worker`): report, never crash the
    start over a bad skill file."""
    from qorven.runtime.database import connection_refusal, database_named

    # PostgreSQL refusing: said in one line, asked outside the pool (whose error says only
    # that it had none after 10 s, each of its tries a warning, then a traceback here).
    refused = connection_refusal()
    if refused:
        stderr.write(f"Skills were not synced: the database ({database_named()}): {refused}\n")
        return None
    try:
        report = skills_sync()
    except Exception as exc:  # a broken skills folder must not keep the server down
        logger.exception("skills sync failed")
        stderr.write(f"Skills were not synced: {exc}\n")
        return None
    stdout.write(report.summary() + "\n")
    for error in report.errors:
        stderr.write(f"  skipped {error}\n")
    return report
