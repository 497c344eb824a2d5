"""`qorven doctor`'s checks of files and settings: the heartbeats defaults file, the skill
files, Django's deploy checks, and what backups need."""
from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator

from django.conf import settings
from django.db import connections

from .check import Check


def heartbeats_checks() -> Iterator[Check]:
    from heartbeats_app.defaults.reading import DefaultsFileError
    from heartbeats_app.defaults.sync import beats_plan, defaults_path

    path = defaults_path()
    try:
        beats_plan(path=path)
    except DefaultsFileError as exc:
        first = exc.problems[0].render(str(path)) if exc.problems else str(exc)
        yield Check("heartbeats", path.name, False, f"{len(exc.problems)} problem(s); first: {first}",
                    "fix the file (`qorven sync-beats --dry-run` lists every problem)")
        return
    yield Check("heartbeats", path.name, True, "valid")


def skills_checks() -> Iterator[Check]:
    from memory_app.skills import SkillFileError, skills_dir, skills_sync

    try:
        report = skills_sync(dry_run=True)
    except SkillFileError as exc:
        yield Check("skills", str(skills_dir()), False, str(exc), "set QORVEN_SKILLS_DIR to the skills folder")
        return
    if report.errors:
        yield Check("skills", str(skills_dir()), False, f"{len(report.errors)} file(s) unreadable: {report.errors[0]}",
                    "fix them (`qorven sync-skills --dry-run` lists each)")
    else:
        yield Check("skills", str(skills_dir()), True, "every skill file reads")


def deploy_checks() -> Iterator[Check]:
    """Each issue Django's `check --deploy` finds, a ✗ of its own (its id, its first
    sentence, our fix where we know the setting): one line for them all named the first and
    hid the rest."""
    from django.core.checks import run_checks

    if connections["default"].vendor == "sqlite" and not settings.REDIS_URL:
        return  # the embedded default is for one machine, not a deployment
    issues = [issue for issue in run_checks(include_deployment_checks=True) if not issue.is_silenced()]
    for issue in issues:
        on = f"{issue.obj}: " if issue.obj is not None else ""
        yield Check("deploy", issue.id or "check --deploy", False, _first_sentence(f"{on}{issue.msg}"),
                    DEPLOY_FIXES.get(issue.id or "", DEPLOY_FIX))
    if not issues:
        yield Check("deploy", "check --deploy", True, "no issues")


DEPLOY_FIX = "see `qorven check --deploy` and the README's production environment"
# The setting a host changes for the issues Qorven's settings decide (names as in the README).
_HTTPS = "or set QORVEN_PUBLIC_URL to the https address, which turns the HTTPS hardening on"
DEPLOY_FIXES = {
    "security.W004": f"set DJANGO_SECURE_HSTS_SECONDS (e.g. 31536000), {_HTTPS}",
    "security.W008": f"set DJANGO_SECURE_SSL_REDIRECT=true, {_HTTPS}",
    "security.W009": "set DJANGO_SECRET_KEY to a long random value, e.g. the output of "
                     "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`, the same on every process",
    "security.W012": f"set DJANGO_SESSION_COOKIE_SECURE=true, {_HTTPS}",
    "security.W016": f"set DJANGO_CSRF_COOKIE_SECURE=true, {_HTTPS}",
    "security.W018": "unset DJANGO_DEBUG (or set it to false)",
    "security.W020": "set DJANGO_ALLOWED_HOSTS to the host names this server answers to",
}


def _first_sentence(text: str, limit: int = 160) -> str:
    first = " ".join(text.split()).split(". ")[0].rstrip(".")
    return first if len(first) <= limit else first[:limit - 1] + "…"


def backup_checks() -> Iterator[Check]:
    """On PostgreSQL `qorven backup` runs pg_dump, which refuses a server newer than itself;
    then the scheduled backups (heartbeats_app.backup_report)."""
    from django.utils import timezone

    from heartbeats_app.backup_report import backup_schedule_report

    yield from _pg_dump()
    report = backup_schedule_report(now=timezone.now())
    yield Check("backup", "schedule", report.ok, report.detail, report.fix)


def _pg_dump() -> Iterator[Check]:
    """PostgreSQL's client programs `qorven backup` (pg_dump) and `qorven restore`
    (pg_restore, its script run by psql) need: found, and not older than the server."""
    connection = connections["default"]
    if connection.vendor != "postgresql":
        return  # SQLite copies and restores itself: nothing to install
    server = connection.get_database_version()[0]  # (major, minor)
    for program, command in (("pg_dump", "qorven backup"), ("pg_restore", "qorven restore"),
                             ("psql", "qorven restore")):
        fix = (f"install PostgreSQL's client programs of version {server} or newer "
               f"(e.g. apt install postgresql-client), or `{command}` cannot run")
        found_at = shutil.which(program)
        if found_at is None:
            yield Check("backup", program, False, f"{program} was not found on PATH", fix)
            continue
        said = subprocess.run([found_at, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        found = re.search(r"(\d+)(?:\.(\d+))?", said)
        client = int(found.group(1)) if found else 0
        if client < server:
            yield Check("backup", program, False, f"{said or 'no version'}: older than the server ({server})", fix)
        else:
            yield Check("backup", program, True, f"{said}: `{command}` can run")
