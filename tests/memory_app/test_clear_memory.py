"""`qorven clear-memory`: scoped, confirmed, reported."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from memory_app.models import Memory
from memory_app.selectors import memory_search
from sessions_app.models import Image, Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..factories.memory_app import remember
from ..factories.tenancy import QorFactory
from ..sqlite_file import sqlite_file_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture
def stocked(world):
    """Memories and a conversation with an image for alice and bob (tenant A, two Qors)
    and charlie (tenant B)."""
    other = QorFactory(tenant=world.tenant_a, slug="other", is_default=False)
    for tenant, qor, user in [(world.tenant_a, world.qor_a, world.alice), (world.tenant_a, world.qor_a, world.bob),
                              (world.tenant_a, other, world.alice), (world.tenant_b, world.qor_b, world.charlie)]:
        remember(tenant, qor, user, f"{user.username} keeps the spare key under the mat")
        session = session_resolve(tenant=tenant, qor=qor, channel="web", user=user)
        message = message_append(session=session, role="user", content="hello", channel="web").message
        Image.objects.create(tenant=tenant, message=message, mime_type="image/png", data="", size=0)
    Image.objects.create(tenant=world.tenant_a, message=None, mime_type="image/png", data="", size=0)
    world.other_qor = other
    return world


def run(*args, answer=None, monkeypatch=None):
    out = io.StringIO()
    if answer is not None:
        monkeypatch.setattr("builtins.input", lambda prompt: answer)
    call_command("clear_memory", *args, stdout=out)
    return out.getvalue()


def owners(model):
    return sorted({(m.tenant.slug, m.user.username) for m in model.objects.select_related("tenant", "user")})


def test_a_user_in_a_tenant_loses_only_their_memories_after_confirming(stocked, monkeypatch):
    output = run("--tenant", "acme", "--user", "alice", answer="yes", monkeypatch=monkeypatch)
    assert "Scope: tenant acme, user alice" in output and "memories: 2" in output
    assert "Deleted 2 memories." in output
    assert owners(Memory) == [("acme", "bob"), ("globex", "charlie")]
    assert Session.objects.count() == 4  # conversations stay without --all
    assert memory_search(tenant=stocked.tenant_a, qor=stocked.qor_a, user=stocked.alice, query="spare key") == []


def test_without_confirmation_nothing_is_deleted(stocked, monkeypatch):
    with pytest.raises(CommandError, match="Aborted"):
        run("--tenant", "acme", answer="no", monkeypatch=monkeypatch)

    assert Memory.objects.count() == 4


def test_input_that_ends_at_the_question_is_a_no_said_on_a_line_of_its_own(stocked, monkeypatch, capsys):
    """`qorven clear-memory … </dev/null`: the refusal went on the question's own line."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # what </dev/null gives input()
    with pytest.raises(CommandError) as refused:
        call_command("clear_memory", "--tenant", "acme")
    assert str(refused.value) == "No answer (end of input): nothing deleted."
    assert capsys.readouterr().out.endswith("Type 'yes' to continue: \n")
    assert Memory.objects.count() == 4


def test_a_dry_run_shows_the_counts_and_deletes_nothing(stocked):
    output = run("--tenant", "acme", "--all", "--dry-run")
    assert "memories: 3" in output and "sessions: 3" in output and "messages: 3" in output
    assert "images: 4" in output and "Dry run: nothing deleted." in output
    assert Memory.objects.count() == 4 and Session.objects.count() == 4 and Image.objects.count() == 5


def test_all_also_deletes_the_qors_sessions_messages_and_images(stocked):
    output = run("--tenant", "acme", "--qor", "other", "--all", "--yes")
    assert "Deleted 1 memories, 1 sessions, 1 messages, 1 images." in output
    assert not Memory.objects.filter(qor=stocked.other_qor).exists()
    assert not Session.objects.filter(qor=stocked.other_qor).exists()
    assert Message.objects.count() == 3 and Image.objects.count() == 4


def test_a_whole_tenant_with_all_takes_its_unattached_images_too(stocked):
    output = run("--tenant", "acme", "--all", "--yes")
    assert "Deleted 3 memories, 3 sessions, 3 messages, 4 images." in output
    assert owners(Memory) == [("globex", "charlie")] and owners(Session) == [("globex", "charlie")]
    assert list(Image.objects.values_list("tenant__slug", flat=True)) == ["globex"]


def test_a_user_across_every_tenant_and_everything(stocked, world):
    from tenancy.models import Membership

    Membership.objects.create(tenant=world.tenant_b, user=world.alice)
    remember(world.tenant_b, world.qor_b, world.alice, "alice in globex")
    assert "Deleted 3 memories." in run("--user", "alice", "--yes")
    assert owners(Memory) == [("acme", "bob"), ("globex", "charlie")]
    assert "Deleted 2 memories, 4 sessions, 4 messages, 5 images." in run("--everything", "--all", "--yes")
    assert not Memory.objects.exists() and not Session.objects.exists() and not Image.objects.exists()
    assert "Nothing to delete." in run("--everything", "--yes")


@pytest.mark.parametrize("args, message", [
    ((), "Say whose memories"),
    (("--qor", "aria"), "--qor needs --tenant"),
    (("--everything", "--tenant", "acme"), "--everything takes no"),
    (("--tenant", "nope"), "no tenant 'nope'"),
    (("--tenant", "acme", "--qor", "nope"), "no qor 'nope'"),
    (("--user", "nobody"), "No user 'nobody'"),
    # Given but empty (`--user "$U"`, U unset): it widened the scope to the whole tenant.
    (("--tenant", "acme", "--user", ""), "--user needs"),
    (("--tenant", "acme", "--qor", ""), "--qor needs"),
    (("--tenant", "", "--user", "alice"), "--tenant needs"),
])
def test_a_missing_or_unknown_scope_is_refused(stocked, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args, "--yes")
    assert Memory.objects.count() == 4


def confide(tenant, qor, user, secret):
    """A memory and a chat exchange of `user` naming `secret`."""
    remember(tenant, qor, user, f"{secret} acquisition target is Vexcorp")
    session = session_resolve(tenant=tenant, qor=qor, channel="web", user=user)
    message_append(session=session, role="user", content=f"Our codename is {secret} for Vexcorp", channel="web")
    message_append(session=session, role="assistant", content=f"Noted: {secret} stays secret.", channel="web")


# The index keeps words lower-cased and stemmed, and may share a word's first letters with
# the word before it: the needles are the middle of each secret.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("erase", ["clear-memory", "deleting the person"])
def test_an_erased_persons_words_are_nowhere_in_the_database_file(world, erase):
    if connection.vendor != "sqlite":
        pytest.skip("the embedded default's file; PostgreSQL's storage is the server's")
    confide(world.tenant_a, world.qor_a, world.alice, "Griffondale")
    confide(world.tenant_a, world.qor_a, world.bob, "Quixmorbel")
    confide(world.tenant_b, world.qor_b, world.charlie, "Zephyrtonk")
    before = sqlite_file_bytes()
    assert b"riffonda" in before and b"uixmorbe" in before and b"ephyrton" in before
    if erase == "clear-memory":
        run("--user", "alice", "--all", "--yes")
    else:
        world.alice.delete()
    after = sqlite_file_bytes()
    left = after.count(b"riffonda")
    assert left == 0
    assert b"uixmorbe" in after and b"ephyrton" in after and b"vexcorp" in after  # the others' stay
    assert [m.content for m in memory_search(tenant=world.tenant_b, qor=world.qor_b, user=world.charlie,
                                             query="Vexcorp")] == ["Zephyrtonk acquisition target is Vexcorp"]


def test_every_sqlite_connection_overwrites_what_it_deletes(db):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA secure_delete")
        assert cursor.fetchone()[0] == 1


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's write-ahead log")
@pytest.mark.django_db(transaction=True)
def test_emptying_the_log_past_a_long_read_gives_up_soon_and_says_so(world):
    """A download (one read snapshot, qorven.runtime.read_snapshot) can hold an old snapshot
    for minutes. Emptying the write-ahead log waits for it, and holds up every writer while
    it waits: it gives up within a few seconds, with the reader still reading, instead of
    waiting out the connection's 30 s."""
    import sqlite3
    import threading

    from qorven.runtime.sqlite_erase import wal_truncate

    remember(world.tenant_a, world.qor_a, world.alice, "first")
    reader = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM memory_app_memory").fetchone()  # its snapshot
    remember(world.tenant_a, world.qor_a, world.alice, "second")  # a page the reader does not see
    done = threading.Event()

    def read_until_done() -> None:
        done.wait(20)
        reader.execute("COMMIT")

    holder = threading.Thread(target=read_until_done)
    holder.start()
    try:
        emptied = wal_truncate()
        still_reading = not done.is_set() and holder.is_alive()
    finally:
        done.set()
        holder.join()
        reader.close()
    assert (emptied, still_reading) == (False, True)
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        assert cursor.fetchone()[0] == 30_000  # the connection's own wait, back as it was


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's write-ahead log")
@pytest.mark.django_db(transaction=True)
def test_run_again_with_nothing_left_to_delete_it_empties_the_log_a_busy_run_left(world):
    """The busy run's advice: the same command again, once quiet, empties the -wal file of
    the deleted text, with nothing left to delete."""
    import os

    remember(world.tenant_a, world.qor_a, world.alice, "the spare key is under the mat")
    run("--tenant", "acme", "--user", "alice", "--yes")
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE wal_probe (n integer)")  # the log has pages again
        cursor.execute("DROP TABLE wal_probe")
    wal = connection.settings_dict["NAME"] + "-wal"
    assert os.path.getsize(wal) > 0
    output = run("--tenant", "acme", "--user", "alice", "--yes")
    assert "Nothing to delete." in output and "busy" not in output
    assert os.path.getsize(wal) == 0
