"""What names a message by its seq still names the same message once a collapse has
renumbered the chat: a rotation's carried question and its original (`carried_from`,
`carried_to`), and the range a compaction notice says it condensed (`from_seq`, `through_seq`)."""
from __future__ import annotations

import base64
import json

import pytest

from channels_app.data_export import PersonExport
from legacy_app.collapse import collapse_sessions
from sessions_app.attachments import images_attach
from sessions_app.models import Message, Session
from sessions_app.services.lifecycle import session_rotate
from sessions_app.services.resolve import session_resolve
from tenancy.trust import Trust

from ..fakes.model_server import reply
from .test_collapse import legacy, say

OGG = b"OggS\x00\x02" + b"\x01" * 200


def canonical_chat(world) -> Session:
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)


def settled(session: Session) -> None:
    """Every question of `session` answered: the collapse then queues no turn."""
    Message.objects.filter(session=session, answer_state="pending").update(answer_state="answered")
    last = Session.objects.get(pk=session.pk).last_seq
    Session.objects.filter(pk=session.pk).update(replied_through_seq=last)


def exported(world) -> list[dict]:
    text = "".join(PersonExport(tenant=world.tenant_a, user=world.alice).lines())
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def carried_twice(world, settings):
    """Alice's web chat and her legacy telegram chat, each rotated by a compaction while a
    question waited: each question's original stays in the archive, its copy goes on."""
    web = canonical_chat(world)
    say(web, 10, "web small talk")
    say(web, 12, "what time is the ferry?", awaits_answer=True)
    web = session_rotate(session=web, carry_unanswered=True).session
    say(web, 13, "The ferry leaves at 9.", role="assistant", metadata={"reply_to": 1})
    settled(web)
    settings.QORVEN_LEGACY_SESSIONS = True
    tg = legacy(world, "telegram")
    say(tg, 0, "where did I park?", awaits_answer=True)
    tg = session_rotate(session=tg, carry_unanswered=True).session
    say(tg, 1, "Level 3, row F.", role="assistant", metadata={"reply_to": 1})
    settled(tg)
    settings.QORVEN_LEGACY_SESSIONS = False
    return web, tg


def test_a_carried_question_in_the_export_still_names_its_copy_and_the_copy_its_original(world, carried_twice):
    """Collapsed, the chat is renumbered (the telegram rows come first) and the telegram
    chat is left empty: an original's `carried_to` must name the row its copy now is."""
    web, tg = carried_twice
    (outcome,) = list(collapse_sessions())
    assert outcome.canonical_id == web.pk
    assert list(web.messages.order_by("seq").values_list("seq", "content")) == [
        (1, "where did I park?"), (2, "Level 3, row F."), (3, "what time is the ferry?"), (4, "The ferry leaves at 9."),
    ]

    lines = [line for line in exported(world) if line["kind"] == "message"]
    by_place = {(line["session"], line["seq"]): line for line in lines}
    originals = [line for line in lines if "carried_to" in line["metadata"]]
    assert sorted(line["content"] for line in originals) == ["what time is the ferry?", "where did I park?"]
    for original in originals:
        named = original["metadata"]["carried_to"]
        copy = by_place.get((named["session"], named["seq"]))
        assert copy is not None, f"{original['content']!r} names {named}, which holds nothing"
        assert (copy["session"], copy["content"]) == (web.pk, original["content"])
        assert copy["metadata"]["carried_from"] == {"session": original["session"], "seq": original["seq"]}
    # The answers still pair with their questions on the page.
    assert by_place[(web.pk, 2)]["metadata"]["reply_to"] == 1
    assert by_place[(web.pk, 4)]["metadata"]["reply_to"] == 3

    before = sorted(Message.objects.values_list("id", "session_id", "seq", "metadata"))
    assert list(collapse_sessions()) == []  # a second run changes nothing
    assert sorted(Message.objects.values_list("id", "session_id", "seq", "metadata")) == before


def test_a_carried_original_left_with_a_copy_the_collapse_dropped_names_the_copy_kept(world, settings):
    """The canonical chat already had the carried question (the same words at the same
    time, as a mirror delivers it): the legacy copy stays behind as a duplicate, and its
    original names the copy the chat goes on with."""
    web = canonical_chat(world)
    say(web, 0, "where did I park?", channel="telegram")
    settled(web)
    settings.QORVEN_LEGACY_SESSIONS = True
    tg = legacy(world, "telegram")
    original = say(tg, 0, "where did I park?", awaits_answer=True)
    session_rotate(session=tg, carry_unanswered=True)
    settings.QORVEN_LEGACY_SESSIONS = False
    (outcome,) = list(collapse_sessions())
    assert outcome.duplicates == 1
    original.refresh_from_db()
    named = original.metadata["carried_to"]
    kept = Message.objects.get(session_id=named["session"], seq=named["seq"])
    assert (kept.session_id, kept.content) == (web.pk, "where did I park?")


def test_a_compaction_notice_still_names_the_first_and_last_message_it_condensed(world, settings):
    """An auto compaction's notice says which run of its chat it condensed (`from_seq`
    through `through_seq`); merged telegram rows land inside and before that run."""
    web = canonical_chat(world)
    for minute in (10, 11, 12, 13):
        say(web, minute, f"web {minute}")
    say(web, 14, "Condensed earlier messages.", role="system", channel="system",
        metadata={"notice": "compaction", "from_seq": 2, "through_seq": 4, "memories": 0})
    settled(web)
    settings.QORVEN_LEGACY_SESSIONS = True
    tg = legacy(world, "telegram")
    for minute in (0, 11, 15):
        say(tg, minute, f"telegram {minute}")
    say(tg, 16, "Condensed earlier messages.", role="system", channel="system",
        metadata={"notice": "compaction", "from_seq": 1, "through_seq": 2, "memories": 0})
    settled(tg)
    settings.QORVEN_LEGACY_SESSIONS = False
    list(collapse_sessions())

    content = dict(web.messages.values_list("seq", "content"))
    ranges = [
        (content[n.metadata["from_seq"]], content[n.metadata["through_seq"]])
        for n in web.messages.filter(metadata__notice="compaction").order_by("seq")
    ]
    assert ranges == [("web 11", "web 13"), ("telegram 0", "telegram 11")]


def test_a_notice_of_a_rotation_keeps_naming_the_archived_chat_it_condensed(world, settings):
    """A /compact notice names the archived chat it condensed: that one is not merged, so
    its seqs stand (and the active chat the notice is in is renumbered around it)."""
    web = canonical_chat(world)
    say(web, 10, "web 10")
    archived = web
    web = session_rotate(session=web).session
    notice = say(web, 11, "Continued from an earlier conversation.", role="system", channel="system",
                 metadata={"notice": "compaction", "compacted_session": archived.pk, "through_seq": 1,
                           "memories": 0})
    settings.QORVEN_LEGACY_SESSIONS = True
    say(legacy(world, "telegram"), 0, "telegram 0")
    settings.QORVEN_LEGACY_SESSIONS = False
    list(collapse_sessions())
    notice.refresh_from_db()
    assert (notice.session_id, notice.seq) == (web.pk, 2)
    assert (notice.metadata["compacted_session"], notice.metadata["through_seq"]) == (archived.pk, 1)


@pytest.mark.django_db(transaction=True)
def test_a_voice_note_carried_before_the_collapse_gets_its_transcript_in_the_merged_chat(
    world, settings, model_server, drain
):
    """A legacy telegram voice note is carried by a compaction before its transcript came,
    then the chats are collapsed: the transcript, when it comes for the original, reaches
    the copy in the merged chat, which is answered there."""
    from qorven.agent.tasks import voice_transcribe_task

    world.qor_a.transcriber_model = "whisper-1"
    world.qor_a.save(update_fields=["transcriber_model"])
    settings.QORVEN_LEGACY_SESSIONS = True
    tg = legacy(world, "telegram")
    say(tg, 0, "earlier words")
    settled(tg)
    note = say(tg, 1, "[voice note]", awaits_answer=True, sender_name="Alice",
               metadata={"trust": Trust.OWNER, "voice": "pending",
                         "attachments": [{"type": "audio", "mime_type": "audio/ogg", "size": len(OGG)}]})
    images_attach(message=note, images=[_Audio()])
    session_rotate(session=tg, carry_unanswered=True)
    settings.QORVEN_LEGACY_SESSIONS = False
    (outcome,) = list(collapse_sessions())
    drain()
    copy = Message.objects.get(session_id=outcome.canonical_id, role="user")
    assert copy.metadata["voice"] == "pending"

    model_server.transcripts.append("Call the plumber tomorrow.")
    model_server.add(reply("I'll remind you."))
    voice_transcribe_task.delay(world.tenant_a.pk, note.pk)  # the note's own task, late
    drain()

    copy.refresh_from_db()
    assert (copy.content, copy.metadata["voice"], copy.answer_state) == (
        "Call the plumber tomorrow.", "transcript", "answered")
    answers = Message.objects.filter(session_id=outcome.canonical_id, role="assistant")
    assert [(m.content, m.channel, m.metadata["reply_to"]) for m in answers] == [
        ("I'll remind you.", "telegram", copy.seq)]


class _Audio:
    mime_type = "audio/ogg"
    data = base64.b64encode(OGG).decode()
    size = len(OGG)
