"""`qorven backup`: a consistent copy of the whole database, taken while messages keep
arriving, owner-only, never over an existing file; restored, it holds what was committed."""
from __future__ import annotations

import io
import os
import stat
import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

from sessions_app.models import Message, Session
from sessions_app.services.append import message_append

from .backup_copies import chat, restored

from ..conftest import database_vendor

pytestmark = pytest.mark.django_db(transaction=True)


def backup(*args: str) -> str:
    out = io.StringIO()
    call_command("backup", *args, stdout=out)
    return out.getvalue()


def test_a_backup_holds_every_tenants_committed_rows_and_is_the_owners_alone(world, tmp_path):
    chat(world, world.alice)
    chat(world, world.charlie, tenant=world.tenant_b, qor=world.qor_b, n=2)
    path = tmp_path / "copy.bak"
    said = backup(str(path))

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f"Backed up to {path}" in said and "5 messages" in said and "2 tenants" in said
    assert not list(tmp_path.glob(".*partial"))
    with restored(path) as cursor:
        cursor.execute("SELECT content FROM sessions_app_message ORDER BY content")
        assert [row[0] for row in cursor.fetchall()] == sorted(Message.objects.values_list("content", flat=True))
        cursor.execute("SELECT slug FROM qorven_tenant ORDER BY slug")
        assert [row[0] for row in cursor.fetchall()] == ["acme", "globex"]


def test_a_backup_never_writes_over_a_file_or_into_a_missing_folder(world, tmp_path):
    kept = tmp_path / "precious.txt"
    kept.write_text("last year's copy")
    with pytest.raises(CommandError, match="already exists"):
        backup(str(kept))
    assert kept.read_text() == "last year's copy"
    with pytest.raises(CommandError, match="is not a directory"):
        backup(str(tmp_path / "nowhere" / "copy.bak"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]


def test_a_backup_taken_while_messages_arrive_is_one_moment_of_the_database(world, tmp_path):
    session = chat(world, world.alice, n=200)
    before = Message.objects.count()
    stop = threading.Event()
    written = []

    def writer():
        try:
            while not stop.is_set():
                message_append(session=session, role="user", content="during the copy", channel="web", notify=False)
                written.append(1)
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(written) < 5:  # the writer is under way before the copy starts
            stop.wait(0.01)
        path = tmp_path / "busy.bak"
        backup(str(path))
        copied_while = len(written)
    finally:
        stop.set()
        thread.join()

    assert copied_while > 5
    with restored(path) as cursor:
        cursor.execute("SELECT count(*), max(seq) FROM sessions_app_message WHERE session_id = %s"
                       .replace("%s", str(session.pk)))
        count, top = cursor.fetchone()
        cursor.execute(f"SELECT last_seq FROM sessions_app_session WHERE id = {session.pk}")
        (last_seq,) = cursor.fetchone()
    # Every message committed before the copy began is in it, and the session's counter
    # and its messages come from one moment: no message past the counter, none missing.
    assert count >= before + 5
    assert count <= Message.objects.filter(session=session).count()
    assert top == last_seq == count
    assert Session.objects.get(pk=session.pk).last_seq >= last_seq


def restore(*args: str) -> str:
    out = io.StringIO()
    call_command("restore", *args, stdout=out)
    return out.getvalue()


def test_a_restore_puts_the_backup_back_and_keeps_the_database_it_replaces(world, tmp_path):
    chat(world, world.alice, n=3)
    path = tmp_path / "monday.bak"
    backup(str(path))
    chat(world, world.bob, n=2)  # written after the backup: kept aside by the restore, not lost
    said = restore(str(path), "--yes", "--keep-dir", str(tmp_path))

    assert sorted(Message.objects.values_list("content", flat=True)) == [f"note {i} from alice" for i in range(3)]
    (kept,) = tmp_path.glob("qorven-before-restore-*")
    assert str(kept) in said and stat.S_IMODE(kept.stat().st_mode) == 0o600
    with restored(kept) as cursor:
        cursor.execute("SELECT count(*) FROM sessions_app_message")
        assert cursor.fetchone()[0] == 5
    chat(world, world.alice, n=1)  # the restored database takes new messages where it left off
    assert Message.objects.count() == 4


def test_a_restore_says_what_the_backup_held(world, tmp_path):
    """On PostgreSQL it named only the dump's file, before and after: a host restoring last
    night's copy could not tell it held the conversations they meant to bring back."""
    chat(world, world.alice, n=3)
    path = tmp_path / "monday.bak"
    backup(str(path))
    chat(world, world.bob, n=2)
    said = restore(str(path), "--yes", "--keep-dir", str(tmp_path))
    assert "3 messages" in said and "2 tenants" in said, said


def test_a_file_that_is_not_a_backup_is_refused_and_nothing_changes(world, tmp_path):
    chat(world, world.alice, n=2)
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database" * 100)
    with pytest.raises(CommandError, match="not a Qorven backup"):
        restore(str(notes), "--yes", "--keep-dir", str(tmp_path))
    assert Message.objects.count() == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_restore_whose_input_ends_at_the_question_is_a_no(world, tmp_path, monkeypatch):
    """`qorven restore FILE </dev/null` ended in an EOFError traceback at "Restore? [y/N]"."""
    chat(world, world.alice, n=1)
    path = tmp_path / "monday.bak"
    backup(str(path))
    chat(world, world.bob, n=2)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # what </dev/null gives input()
    with pytest.raises(CommandError) as refused:
        restore(str(path), "--keep-dir", str(tmp_path))
    assert str(refused.value) == "No answer (end of input): nothing was changed."
    assert Message.objects.count() == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["monday.bak"]


def test_a_backup_from_before_a_table_was_added_is_restored_and_brought_up_to_date(world, schema, tmp_path):
    # A backup made by a version without sessions_app 0013's table (whose rows point at
    # tenants and Qors): the database it replaces has that table, the backup does not.
    chat(world, world.alice, n=2)
    schema.to([("sessions_app", "0012_message_carried_to")])
    path = tmp_path / "last-version.bak"
    backup(str(path))
    schema.latest()
    chat(world, world.bob, n=1)

    restore(str(path), "--yes", "--keep-dir", str(tmp_path))

    assert sorted(Message.objects.values_list("content", flat=True)) == [f"note {i} from alice" for i in range(2)]
    with connection.cursor() as cursor:  # the newer version's table is there again, migrated
        cursor.execute("SELECT count(*) FROM sessions_app_movedthread")
        assert cursor.fetchone()[0] == 0


@pytest.mark.skipif(database_vendor() != "postgresql", reason="a SQLite backup is read back whole before it is used")
def test_a_damaged_backup_is_refused_midway_and_the_database_stays_as_it_was(world, tmp_path):
    session = chat(world, world.alice, n=0)
    for _ in range(200):  # rows that do not compress: most of the file
        message_append(session=session, role="user", content=os.urandom(1000).hex(), channel="web", notify=False)
    path = tmp_path / "damaged.bak"
    backup(str(path))
    chat(world, world.bob, n=2)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 512] = bytes(512)  # the file's list of tables reads whole, some rows do not
    path.write_bytes(bytes(data))

    with pytest.raises(CommandError, match="the database is as it was"):
        restore(str(path), "--yes", "--keep-dir", str(tmp_path))

    assert Message.objects.count() == 202
    assert Message.objects.filter(content="note 1 from bob").exists()


def test_a_backup_counts_one_of_a_thing_in_the_singular(tmp_path):
    """A first install's backup said "1 tenants, 1 people, 1 conversations"."""
    from tests.factories.tenancy import MembershipFactory, QorFactory, TenantFactory, UserFactory

    tenant = TenantFactory(slug="solo")
    QorFactory(tenant=tenant, slug="aria")
    MembershipFactory(tenant=tenant, user=UserFactory(username="only"))
    said = backup(str(tmp_path / "one.bak"))
    assert "1 tenant, 1 person, 0 conversations, 0 messages, 0 memories" in said, said


def test_a_backup_given_a_folder_is_written_into_it_under_the_dated_name(world, tmp_path):
    """`qorven backup /srv/backups` said "/srv/backups already exists; name another file":
    a folder was taken for the file to write."""
    chat(world, world.alice)
    folder = tmp_path / "backups"
    folder.mkdir()
    said = backup(str(folder))
    (written,) = list(folder.iterdir())
    extension = "sqlite3" if database_vendor() == "sqlite" else "dump"
    assert written.name.startswith("qorven-backup-") and written.suffix == f".{extension}", written
    assert said.startswith(f"Backed up to {written} ("), said
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    with restored(written) as cursor:
        cursor.execute("SELECT COUNT(*) FROM sessions_app_message")
        assert cursor.fetchone()[0] == Message.objects.count()
    # A folder named as one (a trailing slash) that is not there is refused, not taken for a file's name.
    with pytest.raises(CommandError, match="no such folder"):
        backup(str(tmp_path / "elsewhere") + "/")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backups"]
