"""`qorven export`: a person's data to stdout or a file, a summary on stderr, clear errors."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from .export_world import of, records


def run_export(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("export", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_writes_the_export_to_stdout_and_sums_it_up_on_stderr(world, lives):
    out, err = run_export("--tenant", "acme", "--user", "alice")
    lines = records(out)
    assert lines[0]["user"] == "alice" and [m["content"] for m in of(lines, "message")][0] == (
        "Remind me to water the ferns")
    assert "2 sessions, 5 messages, 0 attachments, 1 memory, 1 heartbeat, 1 channel identity" in err


def test_a_long_export_says_how_far_it_is_without_a_terminal(world, lives, monkeypatch):
    from channels_app.management.commands import export

    monkeypatch.setattr(export, "PLAIN_PROGRESS_EVERY", 4)  # a long export's step, at this one's size
    out, err = run_export("--tenant", "acme", "--user", "alice")
    assert "… 4 messages so far" in err and "… 4 messages" not in out


def test_the_command_writes_a_file_with_attachments_when_asked(world, photo, tmp_path):
    target = tmp_path / "alice.jsonl"
    out, err = run_export("--tenant", "acme", "--user", "alice", "--qor", "aria", "--with-attachments",
                          "--output", str(target))
    assert out == "" and str(target) in err
    lines = records(target.read_text(encoding="utf-8"))
    assert lines[0]["qor"] == "aria" and of(lines, "attachment")[0]["data"] == "RkVSTlM="


@pytest.mark.parametrize("args, says", [
    (["--tenant", "nope", "--user", "alice"], "no tenant 'nope'"),
    (["--tenant", "acme", "--user", "nobody"], "no user 'nobody'"),
    (["--tenant", "globex", "--user", "alice"], "alice is not a member of globex"),
    (["--tenant", "acme", "--user", "alice", "--qor", "nope"], "no qor 'nope'"),
    (["--tenant", "acme", "--user", "alice", "--qor", ""], "--qor needs a slug"),  # not every Qor's data
])
def test_the_command_says_clearly_what_it_cannot_find(world, lives, args, says, tmp_path):
    with pytest.raises(CommandError, match=says):
        run_export(*args, "--output", str(tmp_path / "x.jsonl"))
    assert not (tmp_path / "x.jsonl").exists()  # no half-written file is left behind


@pytest.mark.parametrize("where, says", [
    ("missing/alice.jsonl", "no such folder"),
    (".", "is a folder"),
])
def test_an_output_it_cannot_write_is_named_and_nothing_is_written(world, lives, tmp_path, where, says):
    """An --output in a folder that does not exist, or naming a folder, ended in a traceback."""
    with pytest.raises(CommandError, match=says):
        run_export("--tenant", "acme", "--user", "alice", "--output", str(tmp_path / where))
    assert list(tmp_path.iterdir()) == []


def test_an_existing_output_is_refused_and_left_as_it_was(world, lives, tmp_path):
    """An existing --output was replaced without a word (`qorven backup` refuses one)."""
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0\n", encoding="utf-8")
    with pytest.raises(CommandError) as refused:
        run_export("--tenant", "acme", "--user", "alice", "--output", str(target))
    assert str(refused.value) == (f"--output {target} already exists; name another file or remove it first; "
                                  "nothing was written")
    assert target.read_text(encoding="utf-8") == "root:x:0:0\n" and list(tmp_path.iterdir()) == [target]


def test_a_reader_that_stops_early_ends_the_export_quietly(world, lives):
    """`qorven export … | head` printed a BrokenPipe traceback."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone
    err = io.StringIO()
    with open(write_end, "w", encoding="utf-8") as gone:
        with pytest.raises(SystemExit) as ended:
            call_command("export", "--tenant", "acme", "--user", "alice", stdout=gone, stderr=err)
    assert ended.value.code == 1 and "Traceback" not in err.getvalue()
    assert "the reader of the output closed it" in err.getvalue()


def test_a_host_exports_the_data_of_someone_who_has_left_when_saying_so(world, lives):
    from tenancy.models import Membership

    Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete()
    with pytest.raises(CommandError, match="--left"):
        run_export("--tenant", "acme", "--user", "alice")
    out, err = run_export("--tenant", "acme", "--user", "alice", "--left")
    assert [m["content"] for m in of(records(out), "message")][0] == "Remind me to water the ferns"
