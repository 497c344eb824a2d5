"""Learned skills: files synced into the database, listed in prompts by trust."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command

from memory_app.models import LearnedSkill
from memory_app.selectors import skills_for
from memory_app.skills import skill_file_parse, skills_sync
from tenancy.tool_registry import ToolContext, registry
from tenancy.trust import Trust

pytestmark = pytest.mark.django_db

BRIEFING = """---
name: briefing
description: A short morning briefing.
min_trust: paired
---
1. Call current_time.
2. Search memory for reminders.
"""
VAULT = """---
name: vault
description: Read the owner's secrets.
min_trust: owner
---
Only for the owner.
"""


@pytest.fixture
def skills_dir(tmp_path, settings):
    settings.QORVEN_SKILLS_DIR = tmp_path
    return tmp_path


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def shared(name):
    return LearnedSkill.objects.get(tenant__isnull=True, name=name)


def test_adding_changing_and_deleting_a_skill_file_is_reflected_by_each_sync(skills_dir):
    write(skills_dir, "briefing.md", BRIEFING)
    report = skills_sync()
    assert report.added == ["briefing"] and not report.errors
    skill = shared("briefing")
    assert (skill.source, skill.path, skill.enabled, skill.min_trust) == ("file", "briefing.md", True, "paired")
    assert skill.body.startswith("1. Call current_time.")
    assert skills_sync().unchanged == ["briefing"]

    write(skills_dir, "briefing.md", BRIEFING.replace("A short", "A crisp").replace("paired", "trusted"))
    assert skills_sync().updated == ["briefing"]
    skill.refresh_from_db()
    assert skill.description == "A crisp morning briefing." and skill.min_trust == "trusted"

    (skills_dir / "briefing.md").unlink()
    assert skills_sync().disabled == ["briefing"]
    assert shared("briefing").enabled is False
    assert skills_for(tenant=None, trust=Trust.OWNER) == []  # type: ignore[arg-type]

    write(skills_dir, "renamed.md", BRIEFING)  # back, under another file name
    assert skills_sync().updated == ["briefing"]
    assert (shared("briefing").enabled, shared("briefing").path) == (True, "renamed.md")


def test_admin_made_skills_are_never_touched_by_a_sync(skills_dir, world):
    own = LearnedSkill.objects.create(tenant=world.tenant_a, name="briefing", description="Acme's own",
                                      body="Acme's way.", source="admin")
    global_admin = LearnedSkill.objects.create(tenant=None, name="vault", description="Made in the admin",
                                               body="Admin body.", source="admin")
    write(skills_dir, "briefing.md", BRIEFING)
    write(skills_dir, "vault.md", VAULT)
    report = skills_sync()
    assert report.added == ["briefing"]
    assert report.errors == ["vault.md: an admin-made skill is named 'vault'; the file is ignored"]
    (skills_dir / "briefing.md").unlink()
    (skills_dir / "vault.md").unlink()
    skills_sync()
    own.refresh_from_db()
    global_admin.refresh_from_db()
    assert (own.description, own.enabled) == ("Acme's own", True)
    assert (global_admin.description, global_admin.body, global_admin.enabled) == ("Made in the admin",
                                                                                    "Admin body.", True)
    # A tenant's own skill shadows the shared one of the same name.
    assert [s.description for s in skills_for(tenant=world.tenant_a, trust=Trust.OWNER) if s.name == "briefing"] == [
        "Acme's own"
    ]


def test_a_broken_file_is_reported_and_its_skill_keeps_its_last_good_version(skills_dir):
    write(skills_dir, "briefing.md", BRIEFING)
    skills_sync()
    write(skills_dir, "briefing.md", BRIEFING.replace("min_trust: paired", "min_trust: everyone"))
    write(skills_dir, "nofront.md", "just text")
    write(skills_dir, "dupe.md", BRIEFING)
    report = skills_sync()
    assert sorted(report.errors) == [
        "briefing.md: min_trust must be one of public, paired, trusted, owner",
        "nofront.md: no front matter (the file must start with a '---' line)",
    ]
    assert report.updated == ["briefing"]  # dupe.md now holds the only valid "briefing"
    assert shared("briefing").path == "dupe.md"
    write(skills_dir, "dupe.md", BRIEFING.replace("1. Call", "1. Always call"))
    (skills_dir / "nofront.md").unlink()
    report = skills_sync()
    assert report.disabled == [] and report.updated == ["briefing"]
    # While its own file is broken, a skill keeps its last good version rather than vanishing.
    (skills_dir / "dupe.md").rename(skills_dir / "kept.md")
    skills_sync()
    write(skills_dir, "kept.md", "---\nname: briefing\n---\nno description")
    report = skills_sync()
    assert report.errors == ["briefing.md: min_trust must be one of public, paired, trusted, owner",
                             "kept.md: description is required (at most 500 characters)"]
    assert report.disabled == [] and shared("briefing").enabled
    assert shared("briefing").body.startswith("1. Always call")


def test_a_dry_run_reports_and_writes_nothing(skills_dir):
    write(skills_dir, "briefing.md", BRIEFING)
    out = io.StringIO()
    call_command("sync_skills", "--dry-run", stdout=out)
    assert "would be added: briefing" in out.getvalue() and "dry run" in out.getvalue()
    assert not LearnedSkill.objects.exists()
    call_command("sync_skills", stdout=out)
    assert shared("briefing").enabled


def test_a_low_trust_surface_does_not_see_an_owner_only_skill(skills_dir, world):
    write(skills_dir, "briefing.md", BRIEFING)
    write(skills_dir, "vault.md", VAULT)
    skills_sync()
    assert [s.name for s in skills_for(tenant=world.tenant_a, trust=Trust.PAIRED)] == ["briefing"]
    assert [s.name for s in skills_for(tenant=world.tenant_a, trust=Trust.PUBLIC)] == []
    assert [s.name for s in skills_for(tenant=world.tenant_a, trust=Trust.OWNER)] == ["briefing", "vault"]

    tool = registry.tools["read_skill"]

    def read(trust, name):
        ctx = ToolContext(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, session_id=0, channel="web",
                          trust=trust)
        return json.loads(registry.execute(ctx, [tool], "read_skill", json.dumps({"name": name})))

    assert read(Trust.OWNER, "vault")["instructions"] == "Only for the owner."
    assert "no skill named 'vault'" in read(Trust.PAIRED, "vault")["error"]
    assert read(Trust.PAIRED, "briefing")["instructions"].startswith("1. Call current_time.")


def test_a_turn_after_the_first_reads_no_skills_and_a_skill_changed_here_is_seen_at_once(
    skills_dir, world, django_assert_num_queries
):
    """Every turn read the tenant's enabled skills: rows edited a few times a year. They
    are kept by the process; a save or a delete in it is seen by the next read."""
    write(skills_dir, "briefing.md", BRIEFING)
    skills_sync()
    assert [s.name for s in skills_for(tenant=world.tenant_a, trust=Trust.OWNER)] == ["briefing"]
    with django_assert_num_queries(0):
        assert [s.name for s in skills_for(tenant=world.tenant_a, trust=Trust.OWNER)] == ["briefing"]

    own = LearnedSkill.objects.create(tenant=world.tenant_a, name="vault", description="Tenant's own.", body="x",
                                      min_trust="owner", source=LearnedSkill.Source.ADMIN)
    assert [s.name for s in skills_for(tenant=world.tenant_a, trust=Trust.OWNER)] == ["briefing", "vault"]
    assert [s.name for s in skills_for(tenant=world.tenant_b, trust=Trust.OWNER)] == ["briefing"]
    own.enabled = False
    own.save(update_fields=["enabled"])
    assert [s.name for s in skills_for(tenant=world.tenant_a, trust=Trust.OWNER)] == ["briefing"]
    shared("briefing").delete()
    assert skills_for(tenant=world.tenant_a, trust=Trust.OWNER) == []


@pytest.mark.django_db(transaction=True)
def test_the_prompt_lists_only_the_skills_the_surface_may_use(skills_dir, world, model_server, drain):
    from qorven.agent.gateway import inbound_accept
    from sessions_app.services.resolve import session_resolve

    from ..fakes.model_server import reply

    write(skills_dir, "briefing.md", BRIEFING)
    write(skills_dir, "vault.md", VAULT)
    skills_sync()
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    model_server.add(reply("hi"), reply("hi again"))
    inbound_accept(session=session, content="hello", channel="telegram", sender_name="Alice", trust=Trust.PAIRED)
    drain()
    inbound_accept(session=session, content="hello", channel="web", sender_name="Alice", trust=Trust.OWNER)
    drain()
    paired, owner = (r["messages"][0]["content"] for r in model_server.requests)
    assert "- briefing: A short morning briefing." in paired and "vault" not in paired
    assert "- vault: Read the owner's secrets." in owner


def test_the_shipped_example_skills_are_valid_and_sync_on_a_fresh_database(settings):
    folder = Path(django_settings.BASE_DIR) / "plugins" / "skills"
    files = sorted(folder.glob("*.md"))
    assert len(files) >= 3
    parsed = [skill_file_parse(f, root=folder) for f in files]
    assert {p.min_trust for p in parsed} >= {"paired", "owner"}
    settings.QORVEN_SKILLS_DIR = folder
    report = skills_sync()
    assert sorted(report.added) == sorted(p.name for p in parsed) and not report.errors


def test_serve_and_worker_sync_skills_at_startup(skills_dir, monkeypatch, settings, serve_once):
    from qorven.runtime.management.commands import serve, worker

    write(skills_dir, "briefing.md", BRIEFING)
    assert "1 added" in serve_once() and shared("briefing").enabled
    assert "skills" in serve.Command.help and "skills" in worker.Command.help

    (skills_dir / "briefing.md").unlink()
    settings.CELERY_BROKER_URL = "redis://unused"
    from qorven.celery import app

    monkeypatch.setattr(app, "worker_main", lambda argv: None)
    out = io.StringIO()
    call_command("worker", stdout=out, stderr=io.StringIO())
    assert "1 disabled" in out.getvalue() and not shared("briefing").enabled


def test_a_skills_folder_that_is_not_there_is_an_error_and_disables_nothing(skills_dir, tmp_path):
    """A mistyped --dir (or QORVEN_SKILLS_DIR) must not read as "every skill removed";
    an empty folder says that, on purpose."""
    import io

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from memory_app.skills import SkillFileError

    write(skills_dir, "briefing.md", BRIEFING)
    skills_sync()
    with pytest.raises(SkillFileError, match="no such folder"):
        skills_sync(directory=tmp_path / "skils")
    with pytest.raises(CommandError, match="no such folder"):
        call_command("sync_skills", "--dir", str(tmp_path / "skils"), stdout=io.StringIO(), stderr=io.StringIO())
    # A file named for the folder was called "no such folder".
    a_file = write(tmp_path, "hostname", "box\n")
    with pytest.raises(CommandError, match=f"{a_file}: not a folder but a file; name the skills folder"):
        call_command("sync_skills", "--dir", str(a_file), stdout=io.StringIO(), stderr=io.StringIO())
    # `--dir "$DIR"` with DIR unset read the current folder, and disabled every skill not in it.
    with pytest.raises(CommandError, match="--dir: an empty path"):
        call_command("sync_skills", "--dir", "", stdout=io.StringIO(), stderr=io.StringIO())
    assert shared("briefing").enabled is True
    empty = tmp_path / "empty"
    empty.mkdir()
    assert skills_sync(directory=empty).disabled == ["briefing"]
