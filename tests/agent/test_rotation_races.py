"""What a rotation (/clear, /compact, manual compaction) does to what is in flight beside it:
the messages it carries keep what came with them, and work finishing for a message after it
was carried reaches the copy the fresh session answers."""
from __future__ import annotations

import base64
from dataclasses import dataclass

import pytest

from qorven.agent.gateway import inbound_accept
from sessions_app.attachments import images_attach
from sessions_app.models import Image, Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.models import Qor
from tenancy.trust import Trust

from ..fakes.model_server import reply
from ..fakes.summarizer import FakeModel, kind_of

pytestmark = pytest.mark.django_db(transaction=True)

FILLER = (
    "Tell me more about subject {i}: the harbour, lighthouses, tides, seagulls, fishing boats, nets, "
    "ropes, the weather over the bay, ferries, timetables, the old market, bakeries and cafés near it."
)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
OGG = b"OggS\x00\x02" + b"\x01" * 200


@dataclass(frozen=True)
class Attachment:
    mime_type: str
    data: str
    size: int


def attachment(mime_type: str, raw: bytes) -> Attachment:
    return Attachment(mime_type, base64.b64encode(raw).decode(), len(raw))


def canonical(world) -> Session:
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)


def seed_history(session: Session, exchanges: int, *, channel: str = "web") -> None:
    """Answered exchanges stored directly, as if the conversation had gone on for a while."""
    for i in range(exchanges):
        message_append(session=session, role="user", content=FILLER.format(i=i), channel=channel, sender_name="Alice")
        message_append(session=session, role="assistant", content=f"About subject {i}.", channel=channel)
    session.refresh_from_db()
    Session.objects.filter(pk=session.pk).update(replied_through_seq=session.last_seq)


@pytest.fixture
def fake(model_server):
    model = FakeModel()
    model_server.default = model
    return model


@pytest.fixture
def manual(world, settings):
    """Manual compaction with a 1000-token main window: a dozen long exchanges overflow it."""
    settings.QORVEN_CONTEXT_RESERVE = 100
    qor = world.qor_a
    qor.main_num_ctx, qor.summarizer_num_ctx, qor.tool_allowlist = 1000, 32000, ["memory_search"]
    qor.summarizer_mode = Qor.SummarizerMode.MANUAL
    qor.save(update_fields=["main_num_ctx", "summarizer_num_ctx", "tool_allowlist", "summarizer_mode"])
    return qor


def main_requests(model_server):
    return [r for r in model_server.requests if kind_of(r) == "main"]


def test_a_photo_whose_question_is_carried_into_the_fresh_session_still_reaches_the_model(
    world, manual, fake, model_server, drain
):
    """Manual mode compacts before answering: the question moves to the fresh session, and
    its photo must go with it (the model was told it was "no longer kept")."""
    manual.main_vision = True
    manual.save(update_fields=["main_vision"])
    old = canonical(world)
    seed_history(old, 12, channel="telegram")
    photo = attachment("image/png", PNG)
    inbound_accept(session=old, content="what is in this picture?", channel="telegram", sender_name="Alice",
                   trust=Trust.PAIRED, images=[photo])
    drain()

    new = canonical(world)
    assert new.pk != old.pk
    carried = Message.objects.get(session=new, role="user")
    assert list(Image.objects.filter(message=carried).values_list("mime_type", "data")) == [("image/png", photo.data)]
    (request,) = main_requests(model_server)
    question = request["messages"][-1]["content"]
    assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{photo.data}"}} in question


def test_a_voice_note_carried_by_compact_before_its_transcript_came_is_answered_in_the_fresh_session(
    world, fake, model_server, drain
):
    """/compact rotates while a voice note waits for its transcript: the transcript arrives
    for the archived original, and the copy in the fresh session is what is answered."""
    from qorven.agent.tasks import voice_transcribe_task

    world.qor_a.transcriber_model = "whisper-1"
    world.qor_a.save(update_fields=["transcriber_model"])
    old = canonical(world)
    seed_history(old, 2)
    # Stored as inbound_accept stores a voice note; its transcription task has not run yet.
    note = message_append(session=old, role="user", content="[voice note]", channel="web", sender_name="Alice",
                          awaits_answer=True, metadata={"trust": Trust.OWNER, "voice": "pending",
                                                        "attachments": [{"type": "audio", "mime_type": "audio/ogg",
                                                                         "size": len(OGG)}]}).message
    images_attach(message=note, images=[attachment("audio/ogg", OGG)])
    inbound_accept(session=old, content="/compact", channel="web", sender_name="Alice", trust=Trust.OWNER)
    drain()
    new = canonical(world)
    assert new.pk != old.pk
    copy = Message.objects.get(session=new, role="user")
    assert copy.metadata["voice"] == "pending" and copy.answer_state == "pending"

    model_server.transcripts.append("Call the plumber tomorrow.")
    fake.main.append(reply("I'll remind you."))
    voice_transcribe_task.delay(world.tenant_a.pk, note.pk)  # the note's own task, late
    drain()

    copy.refresh_from_db()
    assert (copy.content, copy.metadata["voice"], copy.answer_state) == (
        "Call the plumber tomorrow.", "transcript", "answered")
    replies = Message.objects.filter(session=new, role="assistant")
    assert [(m.content, m.metadata["reply_to"]) for m in replies] == [("I'll remind you.", copy.seq)]
    assert len(model_server.transcriptions) == 1
    assert not Message.objects.filter(session=new, metadata__notice="voice_failed").exists()


# --- a rotation holding the chat's row while something else appends to it ---------------------

def blocked_on_a_row_lock(timeout: float = 20.0) -> None:
    """Wait until another connection of this database waits for a row lock (the condition
    the test sets up, not a guess at how long it takes)."""
    import time

    from django.db import connection

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)
    raise AssertionError("nothing came to wait for the rotation's lock")


class HeldRotation:
    """`/clear` of `session` in a thread of its own, its transaction left open (the old row
    locked, the successor created) until `commit()`."""

    def __init__(self, session: Session) -> None:
        import threading

        self.rotated, self.release = threading.Event(), threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(session,), daemon=True)
        self.thread.start()
        assert self.rotated.wait(20), "the rotation did not start"

    def _run(self, session: Session) -> None:
        from django.db import connection, transaction

        from sessions_app.services.lifecycle import session_rotate

        try:
            with transaction.atomic():
                session_rotate(session=session)
                self.rotated.set()
                self.release.wait(30)
        except BaseException as exc:  # reported by commit()
            self.errors.append(exc)
            self.rotated.set()
        finally:
            connection.close()

    def commit(self) -> None:
        self.release.set()
        self.thread.join(30)
        assert not self.errors, self.errors


def in_thread(target, *args, **kwargs):
    """Run `target` in a thread; `result()` joins it and returns (or raises) what it did."""
    import threading

    box: dict[str, object] = {}

    def run() -> None:
        from django.db import connection

        try:
            box["value"] = target(*args, **kwargs)
        except BaseException as exc:
            box["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result():
        thread.join(30)
        assert not thread.is_alive(), "the thread did not finish"
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box.get("value")

    return result


@pytest.mark.skipif("__import__('django.conf').conf.settings.DATABASES['default']['ENGINE'].endswith('sqlite3')",
                    reason="holds a rotation's row lock open; SQLite has no row locks to wait on")
def test_a_heartbeat_delivering_while_the_chat_is_cleared_lands_in_the_fresh_chat(world, model_server):
    """The beat's answer is appended as /clear archives the chat it read a moment before:
    it goes to the fresh chat (it was lost: the run failed with "an error of ours")."""
    from datetime import datetime, timezone as dt_timezone

    from qorven.agent.heartbeat_runs import run_heartbeat

    from ..factories.heartbeats_app import beat

    world.qor_a.heartbeat_model = "beat-model"
    world.qor_a.save(update_fields=["heartbeat_model"])
    pills = beat(world.qor_a, name="pills", prompt="Remind Alice about her pills.", owner=world.alice,
                 deliver_to=world.alice, deliver_channel="telegram")
    old = canonical(world)
    model_server.add(reply("Time for your pills!"))

    rotation = HeldRotation(old)
    run = in_thread(run_heartbeat, tenant_id=world.tenant_a.pk, heartbeat_id=pills.pk,
                    tick=datetime(2026, 11, 30, 8, 0, tzinfo=dt_timezone.utc))
    blocked_on_a_row_lock()  # the delivery waits on the chat's row, which the rotation holds
    rotation.commit()
    result = run()

    assert (result.status, result.error) == ("ok", "")
    fresh = canonical(world)
    assert fresh.pk != old.pk
    delivered = Message.objects.get(pk=result.delivered_message_id)
    assert (delivered.session_id, delivered.content, delivered.channel) == (fresh.pk, "Time for your pills!", "telegram")


# --- a message whose turn gave up while /compact held the chat ------------------------------

class HeldFlush:
    """The scripted summarizer, holding the /compact's memory flush until `release` is set
    (`arrived`: the compaction holds the chat and waits on the model meanwhile)."""

    def __init__(self, model: FakeModel) -> None:
        import threading

        self.model = model
        self.arrived, self.release = threading.Event(), threading.Event()

    def __call__(self, body):
        if kind_of(body) == "flush" and not self.arrived.is_set():
            self.arrived.set()
            assert self.release.wait(30), "the test never let the flush answer"
        return self.model(body)


def ask_during_compact(world, model_server, fake) -> tuple[Session, Message, HeldFlush]:
    """Alice sends /compact, then a question while the compaction holds her chat; the
    question's own turn has given up on the busy chat by then (after its retries)."""
    held = HeldFlush(fake)
    model_server.default = held
    old = canonical(world)
    seed_history(old, 2)
    inbound_accept(session=old, content="/compact", channel="web", sender_name="Alice", trust=Trust.OWNER)
    assert held.arrived.wait(30), "the compaction never called the model"
    # Stored as inbound_accept stores it, with no turn of its own left to answer it.
    question = message_append(session=old, role="user", content="what's next?", channel="web", sender_name="Alice",
                              awaits_answer=True, metadata={"trust": Trust.OWNER}).message
    fake.main.append(reply("The dentist on Friday."))
    return old, question, held


def test_a_message_carried_by_a_long_compact_is_answered_in_the_fresh_session_without_the_sweeper(
    world, fake, model_server, drain
):
    """The compaction carried the question into the fresh session and let go of the chat
    without queuing its turn: it waited for the sweeper's grace and interval."""
    old, question, held = ask_during_compact(world, model_server, fake)
    held.release.set()
    drain()  # the tasks queued so far and what they queue; no sweep runs here

    new = canonical(world)
    assert new.pk != old.pk
    copy = Message.objects.get(session=new, role="user")
    assert (copy.content, copy.answer_state) == ("what's next?", "answered")
    (answer,) = Message.objects.filter(session=new, role="assistant")
    assert (answer.content, answer.metadata["reply_to"]) == ("The dentist on Friday.", copy.seq)
    question.refresh_from_db()
    assert question.answer_state is None  # the archived original waits no more: the copy is the one answered


def test_a_message_waiting_when_compact_fails_is_answered_right_after(world, fake, model_server, drain):
    old, question, held = ask_during_compact(world, model_server, fake)
    fake.flush_override = ["sorry, no JSON today"] * 20
    held.release.set()
    drain()

    assert canonical(world).pk == old.pk
    assert Message.objects.filter(session=old, metadata__notice="compact_failed").exists()
    question.refresh_from_db()
    assert question.answer_state == "answered"
    (answer,) = Message.objects.filter(session=old, role="assistant", metadata__reply_to=question.seq)
    assert answer.content == "The dentist on Friday."
