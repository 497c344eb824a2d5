"""A person's own data, exported: one JSON Lines stream of their conversations, memories,
beats and channel identities in one tenant (channels_app.data_export) — and nothing of
anyone else's."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from channels_app.data_export import PersonExport, export_scope
from heartbeats_app.models import Heartbeat
from memory_app.models import Memory
from sessions_app.models import Message, Session
from sessions_app.services.resolve import session_resolve
from tenancy.errors import NotFound

from ..factories.memory_app import remember
from .export_world import export_text, of, records, say


def test_alices_export_holds_her_conversation_memories_and_beats_and_nothing_of_anyone_else(world, lives):
    text = export_text(world)
    lines = records(text)

    header, end = lines[0], lines[-1]
    assert header["kind"] == "export" and header["format"] == 1
    assert (header["tenant"], header["user"], header["qor"], header["attachments"]) == ("acme", "alice", None, False)
    assert end == {"kind": "end", "sessions": 2, "messages": 5, "attachments": 0, "memories": 1, "heartbeats": 1,
                   "identities": 1}
    chat, mail = of(lines, "session")
    assert (chat["session_kind"], chat["state"], chat["qor"]) == ("canonical", "active", "aria")
    assert (mail["session_kind"], mail["channel"], mail["thread"]) == ("email", "email", "thread-ferns")
    said = [(m["seq"], m["channel"], m["role"], m["content"]) for m in of(lines, "message") if m["session"] == chat["id"]]
    assert said == [  # every surface in seq order, the Qor's tool working left out
        (1, "web", "user", "Remind me to water the ferns"),
        (2, "web", "assistant", "I will, on Sunday."),
        (3, "telegram", "user", "Sent from\u2028my phone"),
        (6, "telegram", "assistant", "Watering is on Sundays."),
    ]
    telegram_line = of(lines, "message")[2]
    assert telegram_line["sender_name"] == "Alice" and telegram_line["answer_state"] is None
    assert telegram_line["metadata"] == {}  # the binding, the platform address, the trust are ours
    assert of(lines, "message")[3]["metadata"] == {"reply_to": 3}  # not the host's model or route
    [memory] = of(lines, "memory")
    assert (memory["type"], memory["content"], sorted(memory["channels"])) == ("fact", "Alice waters ferns on Sundays",
                                                                                ["telegram", "web"])
    [ferns] = of(lines, "heartbeat")
    assert (ferns["name"], ferns["cron"], ferns["timezone"], ferns["enabled"]) == ("ferns", "0 9 * * 0",
                                                                                 "Europe/Berlin", True)
    assert ferns["prompt"] == "Remind Alice about the ferns"
    assert ferns["delivery"] == {"channel": "telegram", "to_you": True}
    [identity] = of(lines, "identity")
    assert (identity["channel"], identity["external_id"], identity["approval"]) == ("telegram", "42", "approved")
    for foreign in ("bob", "Bob", "charlie", "Charlie", "globex", "Aria speaks", "111:AAA", "tg-secret",
                    "host-model-name", "-1009100"):
        assert foreign not in text, foreign


def test_one_qor_only_when_asked(world, lives):
    from tenancy.models import Qor

    other = Qor.objects.create(tenant=world.tenant_a, slug="nova", name="Nova")
    say(session_resolve(tenant=world.tenant_a, qor=other, channel="web", user=world.alice), "to nova", "web")
    everything = records(export_text(world))
    only_nova = records(export_text(world, qor=other))
    assert {s["qor"] for s in of(everything, "session")} == {"aria", "nova"}
    assert [m["content"] for m in of(only_nova, "message")] == ["to nova"]
    assert only_nova[0]["qor"] == "nova" and of(only_nova, "memory") == of(only_nova, "heartbeat") == []
    assert len(of(only_nova, "identity")) == 1  # a channel identity is the tenant's, not one Qor's


def test_an_earlier_conversation_is_exported_with_its_state_and_end(world, lives):
    ended = timezone.now() - timedelta(days=3)
    old = Session.objects.create(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, kind="canonical",
                                 state="archived", started_at=ended - timedelta(days=30), ended_at=ended)
    Message.objects.create(tenant=world.tenant_a, session=old, seq=1, role="user", content="an old hello",
                           channel="whatsapp", sender_name="Alice", created_at=ended)
    earlier = [s for s in of(records(export_text(world)), "session") if s["id"] == old.pk]
    assert earlier[0]["state"] == "archived" and earlier[0]["ended_at"] == ended.isoformat()
    assert "an old hello" in export_text(world)


def test_a_tenant_she_is_not_a_member_of_is_the_same_not_found_as_a_missing_one(world, lives):
    with pytest.raises(NotFound) as foreign:
        export_scope(tenant_slug="globex", user=world.alice)
    with pytest.raises(NotFound) as missing:
        export_scope(tenant_slug="nope", user=world.alice)
    assert str(foreign.value).replace("globex", "X") == str(missing.value).replace("nope", "X")
    with pytest.raises(NotFound):
        export_scope(tenant_slug="acme", user=world.alice, qor_slug="aria-of-globex")
    assert export_scope(tenant_slug="acme", user=world.alice, qor_slug="aria").qor == world.qor_a


def test_attachments_are_described_and_their_data_only_given_when_asked(world, photo):
    plain = export_text(world)
    described = [m for m in of(records(plain), "message") if m["seq"] == photo.seq][0]
    assert described["attachments"] == [{"index": 0, "mime_type": "image/png", "size": 6, "name": "",
                                         "reading": None, "text": None}]
    assert "RkVSTlM=" not in plain and of(records(plain), "attachment") == []

    lines = records(export_text(world, attachments=True))
    [data] = of(lines, "attachment")
    assert (data["session"], data["seq"], data["index"], data["data"]) == (photo.session_id, photo.seq, 0, "RkVSTlM=")
    assert lines.index(data) == lines.index([m for m in lines if m.get("seq") == photo.seq][0]) + 1
    assert lines[0]["attachments"] is True and lines[-1]["attachments"] == 1


def test_a_pdfs_text_as_read_and_why_attachments_were_left_out_are_exported(world, lives):
    """The text read from a PDF (what the Qor was shown of it) and why a message's
    attachments were not kept were left out: the export said a PDF came, not what it said."""
    import base64

    from qorven.agent.pdf_text import pdf_read
    from sessions_app.attachments import image_reading_save
    from sessions_app.models import Image

    from ..pdf_files import pdf

    raw = pdf("Invoice 2291 due 3 March", "Total: 1,200 EUR")
    sent = say(lives, "the invoice", "web", sender_name="Alice", metadata={
        "attachments": [{"type": "file", "mime_type": "application/pdf", "size": len(raw), "name": "invoice.pdf"}]})
    invoice = Image.objects.create(tenant=world.tenant_a, message=sent, mime_type="application/pdf",
                                   name="invoice.pdf", data=base64.b64encode(raw).decode(), size=len(raw))
    read = pdf_read(raw)
    image_reading_save(tenant_id=world.tenant_a.pk, image_id=invoice.pk, reading=read.reading, text=read.text)
    lost = say(lives, "two photos", "telegram", sender_name="Alice",
               metadata={"left_out": 2, "left_out_why": "unpaired"})

    messages = {m["seq"]: m for m in of(records(export_text(world)), "message")}
    assert messages[sent.seq]["attachments"] == [{
        "index": 0, "mime_type": "application/pdf", "size": len(raw), "name": "invoice.pdf", "reading": "text",
        "text": "Invoice 2291 due 3 March\n\nTotal: 1,200 EUR"}]
    assert messages[lost.seq]["metadata"] == {"left_out": 2, "left_out_why": "unpaired"}


def test_a_long_conversation_streams_in_chunks_of_queries_not_rows(world, django_assert_max_num_queries):
    from channels_app.data_export import CHUNK

    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    total = 20_000
    now = timezone.now()
    Message.objects.bulk_create(
        (Message(tenant=world.tenant_a, session=chat, seq=seq, role="user" if seq % 2 else "assistant",
                 content=f"message {seq}", channel="web" if seq % 3 else "telegram", created_at=now)
         for seq in range(1, total + 1)), batch_size=2000)
    Session.objects.filter(pk=chat.pk).update(last_seq=total)

    lines = PersonExport(tenant=world.tenant_a, user=world.alice).lines()
    with django_assert_max_num_queries(4):  # the header and the first chunk: nothing read ahead
        assert json.loads(next(lines))["kind"] == "export"
        assert json.loads(next(lines))["kind"] == "session"
        assert json.loads(next(lines))["seq"] == 1
    chunks = total // CHUNK + 1
    with django_assert_max_num_queries(2 * chunks + 8):
        rest = [json.loads(line) for line in lines]
    seqs = [m["seq"] for m in rest if m["kind"] == "message"]
    assert seqs == list(range(2, total + 1))
    assert rest[-1]["messages"] == total


def test_memory_types_round_trip(world):
    # every kind of note the Qor keeps is exported under its own type
    for kind in Memory.Type.values:
        remember(world.tenant_a, world.qor_a, world.alice, f"a {kind} note", type=kind)
    assert sorted(m["type"] for m in of(records(export_text(world)), "memory")) == sorted(Memory.Type.values)


def test_a_beat_someone_else_set_up_shows_its_answer_to_alice_but_not_its_prompt(world, lives):
    """A config-owned beat (the host's) or one another member made delivers to alice: its
    run's session is hers, but the prompt it ran on is the host's or that member's, not
    part of her export. The answer it gave her stays."""
    from ..factories.heartbeats_app import beat

    hosts = beat(world.qor_a, name="hosts-digest", prompt="HOST PROMPT: summarise with internal runbook #7",
                 managed=True, deliver_to=world.alice, deliver_channel="telegram")
    bobs = beat(world.qor_a, name="bobs-nudge", prompt="Bob's private nudge for alice", owner=world.bob,
                deliver_to=world.alice, deliver_channel="telegram")
    own = Heartbeat.objects.get(owner=world.alice, name="ferns")
    for made, answer in ((hosts, "Your digest"), (bobs, "A nudge"), (own, "Water the ferns")):
        run = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="cron", user=world.alice,
                              thread_id=f"heartbeat:{made.pk}:run:1")
        say(run, made.prompt, "cron", sender_name=f"heartbeat {made.name}", metadata={"heartbeat": made.pk, "run": 1})
        say(run, answer, "cron", role="assistant", sender_name="Aria", metadata={"heartbeat": made.pk, "run": 1})

    text = export_text(world)
    assert "HOST PROMPT" not in text and "Bob's private nudge" not in text
    said = [m["content"] for m in of(records(text), "message") if m["channel"] == "cron"]
    assert said == ["Your digest", "A nudge", "Remind Alice about the ferns", "Water the ferns"]
