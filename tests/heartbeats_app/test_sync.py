"""The defaults file: config-owned beats follow it; user beats are never touched; a bad
file is reported with its line and field and changes nothing."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django_celery_beat.models import PeriodicTask

from heartbeats_app.defaults import DefaultsFileError, beats_plan, beats_sync
from heartbeats_app.models import CLEAR_IMAGES, CONVERSATION_RETENTION, DELIVER_REMINDERS, Heartbeat

from ..factories.heartbeats_app import beat
from ..factories.tenancy import QorFactory

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def defaults(tmp_path, settings):
    path = tmp_path / "heartbeats.json"
    settings.QORVEN_HEARTBEATS_FILE = path

    def write(content) -> Path:
        path.write_text(content if isinstance(content, str) else json.dumps(content, indent=2))
        return path

    return write


def state():
    """(tenant, qor, name) → (cron, managed, prompt, the PeriodicTask's crontab hour, enabled)."""
    return {
        (b.tenant.slug, b.qor.slug, b.name): (b.cron, b.managed, b.prompt, b.periodic_task.crontab.hour,
                                              b.periodic_task.enabled)
        for b in Heartbeat.objects.select_related("tenant", "qor", "periodic_task__crontab")
    }


def test_beats_follow_the_file_through_create_change_and_drop_and_user_beats_stay(world, defaults):
    mine = beat(world.qor_a, name="alice-daily", cron="0 7 * * *", owner=world.alice, prompt="Alice's own")
    user_state = (mine.cron, mine.prompt, mine.periodic_task_id, mine.updated_at)
    brief = {"tenant": "acme", "qor": "aria", "name": "brief", "cron": "0 8 * * 1-5", "prompt": "Morning brief",
             "deliver": {"user": "alice", "channel": "telegram"}}
    weekly = {"tenant": "globex", "name": "weekly", "cron": "0 9 * * 1", "prompt": "Weekly review"}

    defaults({"beats": [brief, weekly]})
    plan = beats_sync()
    assert (len(plan.create), len(plan.update), len(plan.delete)) == (2, 0, 0)
    assert state() == {
        ("acme", "aria", "alice-daily"): ("0 7 * * *", False, "Alice's own", "7", True),
        ("acme", "aria", "brief"): ("0 8 * * 1-5", True, "Morning brief", "8", True),
        ("globex", "aria", "weekly"): ("0 9 * * 1", True, "Weekly review", "9", True),
    }
    assert Heartbeat.objects.get(name="brief").deliver_to == world.alice

    defaults({"beats": [{**brief, "cron": "0 6 * * 1-5", "prompt": "Earlier brief"}, {**weekly, "enabled": False}]})
    plan = beats_sync()
    assert (len(plan.create), len(plan.update), len(plan.delete)) == (0, 2, 0)
    assert state()[("acme", "aria", "brief")] == ("0 6 * * 1-5", True, "Earlier brief", "6", True)
    assert state()[("globex", "aria", "weekly")][4] is False  # paused: its task is disabled

    dropped_task = Heartbeat.objects.get(name="weekly").periodic_task_id
    defaults({"beats": [{**brief, "cron": "0 6 * * 1-5", "prompt": "Earlier brief"}]})
    plan = beats_sync()
    assert (len(plan.create), len(plan.update), len(plan.delete), len(plan.unchanged)) == (0, 0, 1, 1)
    assert set(state()) == {("acme", "aria", "alice-daily"), ("acme", "aria", "brief")}
    assert not PeriodicTask.objects.filter(pk=dropped_task).exists()

    defaults({"beats": []})
    beats_sync()
    assert set(state()) == {("acme", "aria", "alice-daily")}
    mine.refresh_from_db()
    assert (mine.cron, mine.prompt, mine.periodic_task_id, mine.updated_at) == user_state


def test_a_wildcard_beat_goes_to_every_tenant_with_a_default_qor(world, defaults):
    from tenancy.models import Tenant

    Tenant.objects.create(slug="empty", name="No Qor yet")
    QorFactory(tenant=world.tenant_a, slug="second", is_default=False)
    defaults({"beats": [{"tenant": "*", "name": CLEAR_IMAGES, "cron": "30 3 * * *"}]})
    plan = beats_sync()
    assert sorted(state()) == [("acme", "aria", CLEAR_IMAGES), ("globex", "aria", CLEAR_IMAGES)]
    assert any("empty" in note for note in plan.notes)


@pytest.mark.parametrize("content, says", [(b'{"beats": []}\n\xff\xfe', "not UTF-8 text"), (None, "is a folder")])
def test_a_file_that_is_not_text_or_a_folder_is_reported_and_changes_nothing(world, defaults, tmp_path, content, says):
    """`qorven sync-beats --file /bin/ls` ended in a UnicodeDecodeError traceback, and a
    folder was called "no such file"."""
    defaults({"beats": [{"tenant": "acme", "name": "keep", "cron": "0 8 * * *", "prompt": "p"}]})
    beats_sync()
    before = state()
    path = tmp_path / "odd"
    path.write_bytes(content) if content is not None else path.mkdir()
    with pytest.raises(CommandError, match="nothing was changed"):
        call_command("sync_beats", "--file", str(path), stdout=io.StringIO(), stderr=(err := io.StringIO()))
    assert says in err.getvalue()
    with pytest.raises(CommandError, match="--file: an empty path"):  # `--file "$F"`, F unset: not the folder here
        call_command("sync_beats", "--file", "", stdout=io.StringIO(), stderr=io.StringIO())
    assert state() == before


@pytest.mark.parametrize("file", [None, {}, {"comment": "no beats key"}])
def test_a_missing_file_or_one_without_beats_is_an_error_and_changes_nothing(world, defaults, settings, tmp_path, file):
    """A mistyped QORVEN_HEARTBEATS_FILE (or a file that names no beats) must not read as
    "no managed beats" and delete them all; `{"beats": []}` says that, on purpose."""
    defaults({"beats": [{"tenant": "acme", "name": "keep", "cron": "0 8 * * *", "prompt": "p"}]})
    beats_sync()
    before = state()
    if file is None:
        settings.QORVEN_HEARTBEATS_FILE = tmp_path / "heartbeats.defualt.json"
    else:
        defaults(file)
    with pytest.raises(DefaultsFileError) as raised:
        beats_sync()
    assert ("no such file" if file is None else "beats") in str(raised.value)
    assert state() == before
    defaults({"beats": []})
    settings.QORVEN_HEARTBEATS_FILE = tmp_path / "heartbeats.json"
    assert beats_sync().changes == 1 and state() == {}


def test_invalid_json_is_reported_with_its_line_and_changes_nothing(world, defaults):
    defaults({"beats": [{"tenant": "acme", "name": "keep", "cron": "0 8 * * *", "prompt": "p"}]})
    beats_sync()
    before = state()
    defaults('{\n  "beats": [\n    {"tenant": "acme", "name": "x", "cron": "0 8 * * *",}\n  ]\n}\n')
    with pytest.raises(DefaultsFileError) as raised:
        beats_sync()
    (problem,) = raised.value.problems
    assert problem.line == 3
    assert "invalid JSON" in problem.message
    assert state() == before


def test_a_json_error_that_json_words_with_a_trailing_at_reads_whole(world, defaults):
    """A raw line break inside a string was reported as "invalid JSON: Invalid control
    character at", the sentence cut off (json's message leaves its position to the caller)."""
    defaults('{"beats": [{"tenant": "acme", "name": "x\ny", "cron": "0 8 * * *"}]}')
    with pytest.raises(DefaultsFileError) as raised:
        beats_sync()
    (problem,) = raised.value.problems
    assert problem.message == "invalid JSON: Invalid control character", problem.message
    assert problem.line == 1 and problem.column == 41


def test_field_errors_name_the_line_and_field_of_each_problem_and_change_nothing(world, defaults):
    defaults({"beats": [{"tenant": "acme", "name": "keep", "cron": "0 8 * * *", "prompt": "p"}]})
    beats_sync()
    before = state()
    path = defaults(
        '{\n'
        '  "beats": [\n'
        '    {"tenant": "acme", "name": "fine", "cron": "0 9 * * *", "prompt": "p"},\n'
        '    {\n'
        '      "tenant": "acme",\n'
        '      "name": "broken",\n'
        '      "cron": "61 * * * *",\n'
        '      "prompt": "p",\n'
        '      "deliver": {"user": "alice", "channel": "fax"},\n'
        '      "colour": "blue"\n'
        '    },\n'
        '    {"tenant": "nope", "name": "lost", "cron": "0 8 * * *", "prompt": "p"},\n'
        '    {"tenant": "acme", "cron": "0 8 * * *"}\n'
        '  ]\n'
        '}\n'
    )
    with pytest.raises(DefaultsFileError) as raised:
        beats_sync()
    found = {(p.line, p.field) for p in raised.value.problems}
    assert found == {
        (7, "beats[1].cron"),
        (9, "beats[1].deliver.channel"),
        (10, "beats[1].colour"),
        (12, "beats[2].tenant"),  # well formed, checked against the database in the same run
        (13, "beats[3].name"),  # missing: reported at its object
    }
    rendered = str(raised.value)
    assert f"{path}:7: beats[1].cron: " in rendered and "minute" in rendered
    assert state() == before

    # Schema-valid but naming a tenant that does not exist: still located, still nothing changed.
    defaults('{"beats": [\n  {"tenant": "acme", "name": "fine", "cron": "0 9 * * *", "prompt": "p"},\n'
             '  {"tenant": "nope", "name": "lost", "cron": "0 8 * * *", "prompt": "p"}\n]}\n')
    with pytest.raises(DefaultsFileError) as raised:
        beats_sync()
    assert [(p.line, p.field) for p in raised.value.problems] == [(3, "beats[1].tenant")]
    assert state() == before


def test_a_timezone_that_is_a_file_of_the_tz_database_but_no_zone_is_a_problem_of_its_line(world, defaults):
    path = defaults('{"beats": [\n  {"tenant": "acme", "name": "x", "cron": "0 8 * * *", "prompt": "p",\n'
                    '   "timezone": "localtime"}\n]}\n')
    with pytest.raises(DefaultsFileError) as raised:
        beats_sync()
    assert f"{path}:3: beats[0].timezone: " in str(raised.value)
    assert "unknown timezone 'localtime'" in str(raised.value)
    assert state() == {}


def test_a_deactivated_delivery_user_is_a_problem_of_the_plan_and_nothing_changes(world, defaults):
    """Found by `sync-beats --dry-run` (and doctor) too, not only when the sync writes."""
    world.bob.is_active = False
    world.bob.save(update_fields=["is_active"])
    path = defaults('{"beats": [\n {"tenant": "*", "name": "brief", "cron": "0 8 * * *", "prompt": "p",\n'
                    '  "deliver": {"user": "bob", "channel": "telegram"}}\n]}\n')
    with pytest.raises(DefaultsFileError) as raised:
        beats_plan(path=path)
    assert [(p.line, p.field) for p in raised.value.problems] == [(3, "beats[0].deliver.user")]
    assert "bob is deactivated" in str(raised.value)
    with pytest.raises(DefaultsFileError):
        beats_sync()
    assert not Heartbeat.objects.exists()


def test_duplicate_keys_and_duplicate_beats_are_errors(world, defaults):
    defaults('{"beats": [\n {"tenant": "acme", "name": "a", "name": "b", "cron": "0 8 * * *", "prompt": "p"}\n]}')
    with pytest.raises(DefaultsFileError, match="duplicate key 'name'"):
        beats_plan()
    defaults('{"beats": [\n {"tenant": "acme", "name": "a", "cron": "0 8 * * *", "prompt": "p"},\n'
             ' {"tenant": "acme", "qor": "aria", "name": "a", "cron": "0 9 * * *", "prompt": "p"}\n]}')
    with pytest.raises(DefaultsFileError) as raised:
        beats_plan()
    (problem,) = raised.value.problems
    assert (problem.line, problem.field) == (3, "beats[1].name") and "line 2" in problem.message


def test_a_file_beat_never_takes_over_a_user_beat_of_the_same_name(world, defaults):
    mine = beat(world.qor_a, name="daily", owner=world.alice)
    defaults({"beats": [{"tenant": "acme", "name": "daily", "cron": "0 5 * * *", "prompt": "from the file"}]})
    with pytest.raises(DefaultsFileError, match="made by a user"):
        beats_sync()
    mine.refresh_from_db()
    assert (mine.cron, mine.managed) == ("0 8 * * *", False)


def test_sync_beats_dry_run_shows_the_plan_and_changes_nothing(world, defaults, capsys):
    defaults({"beats": [{"tenant": "acme", "name": "brief", "cron": "0 8 * * *", "prompt": "p"}]})
    call_command("sync_beats", "--dry-run")
    out = capsys.readouterr().out
    assert "create  acme/aria brief  (0 8 * * *)" in out
    assert "1 to create" in out and "nothing was changed" in out
    assert not Heartbeat.objects.exists()
    call_command("sync_beats")
    assert "1 created" in capsys.readouterr().out
    assert Heartbeat.objects.get().managed


def test_sync_beats_reports_problems_and_fails(world, defaults, capsys):
    path = defaults('{"beats": [\n {"tenant": "acme", "name": "x", "cron": "soon", "prompt": "p"}\n]}')
    with pytest.raises(CommandError, match="1 problem"):
        call_command("sync_beats")
    assert f"{path}:2: beats[0].cron:" in capsys.readouterr().err


def test_the_shipped_defaults_file_is_valid(world, settings):
    settings.QORVEN_HEARTBEATS_FILE = ROOT / "heartbeats.default.json"
    plan = beats_plan()
    assert {(d.tenant.slug, d.spec.name) for d in plan.create} == {
        (tenant, name) for tenant in ("acme", "globex")
        for name in (CLEAR_IMAGES, DELIVER_REMINDERS, CONVERSATION_RETENTION)}


def test_a_key_the_file_does_not_take_is_named_with_the_keys_it_does(world, defaults):
    """A misspelt key ("delivery" for "deliver") was reported in pydantic's words, "Extra
    inputs are not permitted", which do not say what to write instead."""
    defaults({"beats": [{"tenant": "acme", "name": "x", "cron": "0 8 * * *", "prompt": "p",
                         "delivery": {"user": "alice", "channel": "telegram"}}]})
    with pytest.raises(DefaultsFileError) as raised:
        beats_sync()
    (problem,) = raised.value.problems
    assert problem.field == "beats[0].delivery", problem
    assert problem.message.startswith("not a key of a beat") and "deliver" in problem.message, problem.message



def test_a_users_beat_named_like_a_file_beat_they_do_not_see_does_not_stop_the_file_syncing(world, defaults):
    """The file's "digest" goes to Bob, so Alice, who does not see it, may name a beat of
    her own "digest" (a user's beats are named in their own space). The next sync read her
    beat as the file's, refused the whole file, and changed nothing of any tenant's."""
    def digest(cron):
        return {"beats": [{"tenant": "acme", "name": "digest", "cron": cron, "prompt": "Bob's digest",
                           "deliver": {"user": "bob", "channel": "telegram"}},
                          {"tenant": "globex", "name": "standup", "cron": cron, "prompt": "Globex standup"}]}

    defaults(digest("0 5 * * *"))
    beats_sync()
    hers = beat(world.qor_a, name="digest", cron="0 8 * * *", prompt="my own digest", owner=world.alice)

    defaults(digest("0 6 * * *"))
    beats_sync()

    managed = Heartbeat.objects.get(name="digest", managed=True)
    assert (managed.cron, managed.deliver_to) == ("0 6 * * *", world.bob)
    assert Heartbeat.objects.get(name="standup").cron == "0 6 * * *"
    hers.refresh_from_db()
    assert (hers.cron, hers.prompt, hers.managed) == ("0 8 * * *", "my own digest", False)


def test_a_file_beat_given_to_someone_with_a_beat_of_that_name_is_reported_as_theirs(world, defaults):
    """The file's "digest" went to Bob, so Alice named a beat of her own "digest"; the file
    then gave it to her. The sync told its operator "you already have a beat named
    'digest'" (the operator has none), and only when it wrote: a dry run planned the update."""
    def digest(user):
        return {"beats": [{"tenant": "acme", "name": "digest", "cron": "0 5 * * *", "prompt": "The digest",
                           "deliver": {"user": user, "channel": "telegram"}}]}

    defaults(digest("bob"))
    beats_sync()
    beat(world.qor_a, name="digest", cron="0 8 * * *", prompt="my own digest", owner=world.alice)

    defaults(digest("alice"))
    for run in (beats_plan, beats_sync):
        with pytest.raises(DefaultsFileError) as raised:
            run()
        (problem,) = raised.value.problems
        assert problem.field == "beats[0].name", problem
        assert "you already" not in problem.message, problem.message
        assert problem.message == ("acme/aria digest already exists as a beat made by a user who would see this "
                                   "one; user beats are never touched, so rename the one in the file")
    assert Heartbeat.objects.get(name="digest", managed=True).deliver_to == world.bob
