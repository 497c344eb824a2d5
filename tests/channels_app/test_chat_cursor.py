"""The chat cursor's rules as tables: events and stored rows in, frames and reads out, with
no socket, layer or database (channels_app.chat_cursor)."""
from __future__ import annotations

import pytest

from channels_app.chat_cursor import ChatCursor, Step

S = 7  # the watched session


def msg(seq: int, role: str = "user", reply_to: int | None = None, hidden: bool = False, session: int = S) -> dict:
    return {"type": "message.new", "session_id": session, "seq": seq, "role": role, "content": f"m{seq}",
            "reply_to": reply_to, "hidden": hidden}


def chunk(reply_to: int, delta: str, offset: int | None, session: int = S) -> dict:
    event = {"type": "message.chunk", "session_id": session, "reply_to": reply_to, "delta": delta}
    return event if offset is None else {**event, "offset": offset}


def cursor_at(sent_seq: int, *, deltas: bool = False) -> ChatCursor:
    cursor = ChatCursor(deltas=deltas)
    cursor.watch(S, sent_seq=sent_seq)
    return cursor


def seqs(step: Step) -> list[int]:
    return [f["seq"] for f in step.frames if f["type"] == "message.new"]


@pytest.mark.parametrize(("sent", "event", "frames", "catch_up"), [
    (3, msg(4), [4], False),  # the next one: sent
    (3, msg(3), [], False),  # already sent from the database
    (3, msg(2), [], False),
    (3, msg(6), [], True),  # 4 and 5 went missing: read the database
    (3, msg(4, session=99), [], False),  # another session's
])
def test_live_messages_are_sent_once_in_order_and_a_gap_reads_the_database(sent, event, frames, catch_up):
    cursor = cursor_at(sent)
    step = cursor.live(event)
    assert (seqs(step), step.catch_up) == (frames, catch_up)
    assert cursor.sent_seq == max([sent, *frames])
    assert all("session_id" not in f for f in step.frames)


def test_stored_rows_skip_what_was_sent_and_end_the_streams_of_their_replies():
    cursor = cursor_at(4)
    assert cursor.live(chunk(4, "Hel", 0)).frames[0]["delta"] == "Hel"
    frames = cursor.rows([msg(3), msg(4), msg(5, "assistant", reply_to=4), msg(6, "tool", hidden=True)])
    assert [(f["seq"], f.get("streamed")) for f in frames] == [(5, True), (6, None)]
    assert cursor.live(chunk(4, "lo", 3)).frames == []  # a late chunk of a stored reply
    assert cursor.rows([msg(7, "assistant", reply_to=6)])[0]["streamed"] is False


@pytest.mark.parametrize(("have", "delta", "offset", "sent", "snapshot"), [
    ("", "Hi", 0, "Hi", None),
    ("Hel", "lo", 3, "lo", None),  # in order
    ("Hel", "lo", None, "lo", None),  # a producer that does not count offsets: trusted in order
    ("Hello", "llo", 2, "", None),  # the snapshot already held it
    ("Hel", "ello", 1, "lo", None),  # overlapping what the client has: only the new part
    ("He", "o", 4, "", 4),  # a chunk went missing: ask for the text so far
])
def test_chunks_continue_a_reply_exactly_once(have, delta, offset, sent, snapshot):
    cursor = cursor_at(4)
    if have:
        cursor.stream({"reply_to": 4, "text": have})
    step = cursor.live(chunk(4, delta, offset))
    got = "".join(f["delta"] for f in step.frames)
    assert (got, step.snapshot) == (sent, snapshot)
    if step.frames:
        assert step.frames[0]["offset"] == len(have) and cursor.texts[4] == have + got


def test_a_missing_chunk_is_replaced_by_the_text_so_far_as_a_frame_or_as_the_missing_piece():
    page, terminal = cursor_at(4), cursor_at(4, deltas=True)
    for cursor in (page, terminal):
        cursor.live(chunk(4, "He", 0))
        assert cursor.live(chunk(4, "o!", 4)).snapshot == 4
    snapshot = {"reply_to": 4, "text": "Hello!"}
    assert page.stream(snapshot, reply_to=4) == [{"type": "message.stream", "reply_to": 4, "text": "Hello!"}]
    assert terminal.stream(snapshot, reply_to=4) == [
        {"type": "message.chunk", "reply_to": 4, "delta": "llo!", "offset": 2}]
    assert page.stream({"reply_to": 9, "text": "other"}, reply_to=4) == []  # another reply by now


@pytest.mark.parametrize("deltas", [False, True])
def test_a_new_tries_first_chunk_replaces_the_dead_tries_text_the_client_holds(deltas):
    """The client held 15 characters a dead worker streamed; the next try's chunks at
    offsets 0.. were dropped or glued after them ("The dead try'sFresh…")."""
    cursor = cursor_at(3, deltas=deltas)
    cursor.live(chunk(3, "The dead try's ", 0))
    step = cursor.live({**chunk(3, "Fresh", 0), "restart": True})
    assert step.frames == [{"type": "message.stream", "reply_to": 3, "text": ""},
                           {"type": "message.chunk", "reply_to": 3, "delta": "Fresh", "offset": 0}]
    assert cursor.live(chunk(3, " text", 5)).frames[0]["offset"] == 5
    # A client that holds nothing of the reply needs no reset.
    fresh = cursor_at(3, deltas=deltas)
    assert fresh.live({**chunk(3, "Fresh", 0), "restart": True}).frames == [
        {"type": "message.chunk", "reply_to": 3, "delta": "Fresh", "offset": 0}]


def test_done_reads_the_reply_first_when_it_was_not_sent_and_ends_the_stream():
    cursor = cursor_at(4)
    cursor.live(chunk(4, "Hi", 0))
    step = cursor.live({"type": "message.done", "session_id": S, "reply_to": 4, "seq": 5})
    assert step.catch_up and step.frames == [{"type": "message.done", "reply_to": 4, "seq": 5}]
    assert cursor.live(chunk(4, "!", 2)).frames == []  # finished: nothing streams again
    assert cursor.stream({"reply_to": 4, "text": "Hi!"}) == []


def test_retry_lets_a_finished_reply_stream_again():
    cursor = cursor_at(5)
    cursor.rows([msg(5, "assistant", reply_to=4)])
    step = cursor.live({"type": "message.answer", "session_id": S, "seq": 4, "answer_state": "pending"})
    assert step.frames == [{"type": "message.answer", "seq": 4, "answer_state": "pending"}]
    assert cursor.live(chunk(4, "Again", 0)).frames[0]["delta"] == "Again"


@pytest.mark.parametrize("event", [
    {"type": "message.answer", "session_id": S, "seq": 9, "answer_state": "failed"},
    {"type": "message.delivery", "session_id": S, "seq": 9, "delivery": "failed", "platform": "telegram"},
])
def test_a_state_change_for_a_message_not_sent_yet_reads_it_from_the_database(event):
    step = cursor_at(5).live(event)
    assert step.catch_up and step.frames == []


def test_a_delivery_failure_of_a_sent_reply_is_passed_on():
    step = cursor_at(9).live({"type": "message.delivery", "session_id": S, "seq": 9, "delivery": "failed",
                              "platform": "telegram"})
    assert step.frames == [{"type": "message.delivery", "seq": 9,
                            "delivery": {"state": "failed", "platform": "telegram"}}]


def test_a_new_session_is_followed_from_scratch():
    cursor = cursor_at(12)
    cursor.live(chunk(12, "x", 0))
    assert cursor.live({"type": "session.started", "session_id": S}) == Step()  # the one watched
    assert cursor.live({"type": "session.started", "session_id": 8}).follow == 8
    cursor.watch(8, sent_seq=0)
    assert (cursor.session_id, cursor.sent_seq, cursor.texts, list(cursor.finished)) == (8, 0, {}, [])
    assert seqs(cursor.live(msg(1, session=8))) == [1]


def test_events_clients_are_not_shown_do_nothing():
    assert cursor_at(3).live({"type": "something.else", "session_id": S}) == Step()


@pytest.mark.parametrize("deltas", [True, False], ids=["terminal", "page"])
def test_a_reply_that_started_afresh_while_its_restart_was_lost_is_shown_afresh(deltas):
    """The layer may drop an event under load. A thinking model's reasoning streamed, its
    restart was lost, and its answer (shorter than the reasoning) came as chunks from
    offset 0: they read as text the client already had, and the answer was never shown,
    its reasoning left in its place."""
    cursor = cursor_at(3, deltas=deltas)
    assert cursor.live(chunk(3, "The user greets me.\n", 0)).frames == [
        {"type": "message.chunk", "reply_to": 3, "delta": "The user greets me.\n", "offset": 0}]
    lost = cursor.live(chunk(3, "Hello", 0))  # the restart before it never came
    assert lost.frames == [] and lost.snapshot == 3  # the text so far is read instead
    frames = cursor.stream({"reply_to": 3, "text": "Hello Priya!"})
    if deltas:
        assert frames == [{"type": "message.stream", "reply_to": 3, "text": ""},
                          {"type": "message.chunk", "reply_to": 3, "delta": "Hello Priya!", "offset": 0}]
    else:
        assert frames == [{"type": "message.stream", "reply_to": 3, "text": "Hello Priya!"}]
    assert cursor.live(chunk(3, "Hello Priya!", 0)).frames == []  # held already
    assert cursor.live(chunk(3, " How", 12)).frames == [
        {"type": "message.chunk", "reply_to": 3, "delta": " How", "offset": 12}]
    assert cursor.stream({"reply_to": 3, "text": "Hello Priya! How"}) == (
        [] if deltas else [{"type": "message.stream", "reply_to": 3, "text": "Hello Priya! How"}])


def reply_row(seq: int, reply_to: int, content: str, role: str = "assistant") -> dict:
    return {**msg(seq, role, reply_to=reply_to), "content": content}


def test_a_terminal_shown_reasoning_whose_restart_is_still_on_its_way_has_it_taken_back_by_the_stored_reply():
    """A catch-up read the stored reply before the live restart and answer chunks came
    (which are then late, and dropped): the terminal had printed only the reasoning."""
    cursor = cursor_at(4, deltas=True)
    cursor.live(chunk(4, "The user greets me.", 0))
    frames = cursor.rows([reply_row(5, 4, "Hello Priya!")])
    assert [(f["type"], f.get("text"), f.get("streamed")) for f in frames] == [
        ("message.stream", "", None), ("message.new", None, False)]
    assert cursor.live({"type": "message.restart", "session_id": S, "reply_to": 4}).frames == []  # late: dropped


def test_a_terminal_given_the_stored_reply_before_its_last_chunks_is_sent_them_first():
    cursor = cursor_at(4, deltas=True)
    cursor.live(chunk(4, "Hello", 0))
    frames = cursor.rows([reply_row(5, 4, "Hello Priya!")])
    assert [(f["type"], f.get("delta"), f.get("offset"), f.get("streamed")) for f in frames] == [
        ("message.chunk", " Priya!", 5, None), ("message.new", None, None, True)]
    assert cursor.live(chunk(4, " Priya!", 5)).frames == []


def test_a_terminal_shown_a_whole_reply_or_more_of_a_stopped_one_shows_the_row_as_streamed():
    for shown, stored in (("Hello Priya!", "Hello Priya!"), ("Hello Pri", "Hello")):
        cursor = cursor_at(4, deltas=True)
        cursor.live(chunk(4, shown, 0))
        assert [(f["type"], f.get("streamed")) for f in cursor.rows([reply_row(5, 4, stored)])] == [
            ("message.new", True)]


def test_a_notice_of_ours_after_part_of_a_reply_is_shown_whole_on_a_terminal():
    cursor = cursor_at(4, deltas=True)
    cursor.live(chunk(4, "Hello", 0))
    frames = cursor.rows([reply_row(5, 4, "The model stopped answering.", role="system")])
    assert [(f["type"], f.get("streamed")) for f in frames] == [("message.new", False)]
