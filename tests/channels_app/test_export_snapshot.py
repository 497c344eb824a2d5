"""An export is one moment of the person's data, however long it takes to read and
whatever is written meanwhile: its listing and its counts agree with each other and with
the database as it was when the export began, and the writers it ran beside were not
held up (channels_app.data_export, qorven.runtime.read_snapshot)."""
from __future__ import annotations

import io
import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.utils import timezone

from channels_app.data_export import CHUNK
from memory_app.models import Memory
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.services import api_token_create

from ..factories.memory_app import remember
from .export_world import of, records

pytestmark = pytest.mark.django_db(transaction=True)

WRITER_GIVEN = 10.0  # seconds the writer may take: an export holding the write lock would keep it 30


@pytest.fixture
def long_chat(world):
    """Alice's chat, longer than one chunk of messages, and a memory of it."""
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    total = CHUNK + 500
    now = timezone.now()
    Message.objects.bulk_create(
        (Message(tenant=world.tenant_a, session=chat, seq=seq, role="user" if seq % 2 else "assistant",
                 content=f"message {seq} " + "about the ferns " * 8, channel="web", created_at=now)
         for seq in range(1, total + 1)), batch_size=500)
    Session.objects.filter(pk=chat.pk).update(last_seq=total)
    remember(world.tenant_a, world.qor_a, world.alice, "Alice waters ferns on Sundays", source_session_id=chat.pk)
    return chat


class Writer:
    """What the service writes while an export is read: a reply and two more messages in
    alice's chat, an email thread of hers, and a memory taken from it. Run on a thread of
    its own (its own connection), committed before `run` returns."""

    def __init__(self, world, chat: Session) -> None:
        self.world, self.chat = world, chat
        self.took: float | None = None
        self.failed: BaseException | None = None

    def run(self) -> None:
        thread = threading.Thread(target=self._write)
        thread.start()
        thread.join(WRITER_GIVEN + 30)
        assert not thread.is_alive(), "the writer never finished"
        if self.failed is not None:
            raise self.failed
        assert self.took is not None and self.took < WRITER_GIVEN, f"the export held the writer up {self.took:.1f} s"

    def _write(self) -> None:
        world, started = self.world, time.monotonic()
        try:
            for text in ("written during the export", "and again", "and once more"):
                message_append(session=self.chat, role="user", content=text, channel="web", notify=False)
            mail = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="email", user=world.alice,
                                   thread_id="thread-during")
            message_append(session=mail, role="user", content="an email during the export", channel="email",
                           notify=False)
            remember(world.tenant_a, world.qor_a, world.alice, "Alice mailed during the export",
                     source_session_id=mail.pk)
            self.took = time.monotonic() - started
        except BaseException as exc:  # shown by run(), on the test's thread
            self.failed = exc
        finally:
            connections.close_all()


class WritesAfterTheFirstBlock(io.StringIO):
    """The command's output: once the first block of the export has come (its first chunk
    of messages read, the rest not yet), the writer commits before the export goes on."""

    def __init__(self, writer: Writer) -> None:
        super().__init__()
        self.writer = writer
        self.blocks = 0

    def write(self, text: str) -> int:
        self.blocks += 1
        if self.blocks == 1:
            self.writer.run()
        return super().write(text)


def moment(world) -> dict:
    """What alice has now, as her export lists it."""
    sessions = Session.objects.filter(tenant=world.tenant_a, user=world.alice).exclude(kind=Session.Kind.GROUP)
    return {
        "sessions": sorted(sessions.values_list("pk", flat=True)),
        "messages": sorted(Message.objects.filter(session__in=sessions).values_list("session_id", "seq")),
        "memories": sorted(Memory.objects.filter(tenant=world.tenant_a, user=world.alice).values_list("pk", flat=True)),
    }


def assert_one_moment(lines: list[dict], before: dict) -> None:
    listed = {
        "sessions": sorted(s["id"] for s in of(lines, "session")),
        "messages": sorted((m["session"], m["seq"]) for m in of(lines, "message")),
        "memories": sorted(m["id"] for m in of(lines, "memory")),
    }
    assert listed == before  # the moment it began: nothing written since
    end = lines[-1]
    assert end["kind"] == "end"
    assert (end["sessions"], end["messages"], end["memories"]) == (
        len(listed["sessions"]), len(listed["messages"]), len(listed["memories"]))
    assert {m["source_session"] for m in of(lines, "memory")} <= set(listed["sessions"])


def test_the_command_exports_one_moment_while_messages_and_memories_are_written(world, long_chat):
    before = moment(world)
    writer = Writer(world, long_chat)
    out = WritesAfterTheFirstBlock(writer)
    call_command("export", "--tenant", "acme", "--user", "alice", stdout=out, stderr=io.StringIO())

    assert out.blocks > 1  # the writer came in the middle of the export, not after it
    assert_one_moment(records(out.getvalue()), before)
    after = moment(world)  # what was written is there, for the next export
    assert len(after["messages"]) == len(before["messages"]) + 4 and len(after["memories"]) == 2


def test_a_download_over_asgi_is_one_moment_while_messages_are_written(world, long_chat):
    """Each block of the download is read by a call of its own on the request's thread:
    the snapshot spans them all."""
    from asgiref.sync import async_to_sync, sync_to_async
    from django.test import AsyncClient

    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    before = moment(world)
    writer = Writer(world, long_chat)

    async def download() -> bytes:
        response = await AsyncClient().get("/v1/export", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200 and response.is_async
        blocks = []
        async for block in response.streaming_content:
            blocks.append(block)
            if len(blocks) == 1:
                await sync_to_async(writer.run, thread_sensitive=False)()
        assert len(blocks) > 1
        return b"".join(blocks)

    assert_one_moment(records(async_to_sync(download)().decode()), before)


def test_a_download_left_half_way_ends_its_read_at_once(client, world, long_chat):
    """The person closes the tab: the response is closed on the request's thread, and the
    export's transaction with it, before its connection goes back (to the pool)."""
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = client.get("/v1/export", HTTP_AUTHORIZATION=f"Bearer {token}")
    next(iter(response.streaming_content))
    assert connection.in_atomic_block  # the export's read, still open
    response.close()
    assert not connection.in_atomic_block
    Writer(world, long_chat).run()
    assert Message.objects.filter(session=long_chat).count() == CHUNK + 503  # this connection reads now again


def test_a_download_read_slower_than_the_export_time_allows_is_cut_there(client, world, long_chat, settings):
    """A client that takes a block now and then (a trickle, by choice or by link) does not
    keep the export's snapshot for as long as it likes: past QORVEN_EXPORT_TIMEOUT the
    download ends without its `end` line, and the read with it."""
    settings.QORVEN_EXPORT_TIMEOUT = 1
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = client.get("/v1/export", HTTP_AUTHORIZATION=f"Bearer {token}")
    try:
        blocks = iter(response.streaming_content)
        first = next(blocks)
        time.sleep(1.5)
        rest = b"".join(blocks)
        assert not connection.in_atomic_block  # the export's read is over
    finally:
        response.close()
    lines = records((first + rest).decode())
    assert lines[0]["kind"] == "export" and lines[-1]["kind"] != "end"  # a reader knows the file is not whole
    assert len(of(lines, "message")) < CHUNK + 500


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL ends a stalled snapshot itself")
def test_a_download_whose_client_stops_reading_holds_its_snapshot_no_longer_than_the_export_time(
    client, world, long_chat, settings
):
    """A client that stops reading leaves the response waiting to send: no code of the
    export runs again until it reads on (or goes). Its snapshot still ends at
    QORVEN_EXPORT_TIMEOUT: VACUUM and a migration are not held up for as long as the client
    keeps its connection open."""
    settings.QORVEN_EXPORT_TIMEOUT = 3  # room for the first look on a loaded machine
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = client.get("/v1/export", HTTP_AUTHORIZATION=f"Bearer {token}")
    try:
        next(iter(response.streaming_content))
        stalled(pid)
    finally:
        response.close()  # the client goes at last: the export closes without an error
    assert not connection.in_atomic_block
    assert Message.objects.filter(session=long_chat).count() == CHUNK + 500  # this connection reads again


def stalled(pid: int) -> None:
    """The backend `pid` holds a snapshot while nothing is read, and no longer than 4 s more."""
    def state() -> str | None:
        found: list = []

        def look() -> None:
            try:
                with connections["default"].cursor() as cursor:
                    cursor.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", [pid])
                    found.extend(cursor.fetchall())
            finally:
                connections.close_all()

        thread = threading.Thread(target=look)
        thread.start()
        thread.join()
        return found[0][0] if found else None

    assert state() == "idle in transaction"  # the snapshot, held while the client reads nothing
    time.sleep(4)
    assert state() is None  # the snapshot is gone: PostgreSQL ended it
