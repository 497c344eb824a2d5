"""A model server that answers, but badly: a stream it garbles, text with broken
characters, an empty answer, keep-alives that never end. Each is a failure of that
message — bounded, in our words, the next message answered — never a turn that crashes,
is queued again for ever and holds the conversation."""
from __future__ import annotations

import json
import threading
import time

import pytest

from qorven.agent.turn_endings import CUT_OFF_NOTICE
from sessions_app.models import Message, Session
from tenancy.services import api_token_create
from tenancy.tool_registry import Tool, registry

from ..fakes.model_server import Step, reply

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/v1/qors/aria/messages"


@pytest.fixture
def ask(client, world):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]

    def ask(content: str) -> dict:
        response = client.post(URL, data=json.dumps({"content": content}), content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201, response.content
        return response.json()

    return ask


@pytest.fixture
def quick(settings):
    settings.QORVEN_MODEL_RETRIES = 0
    settings.QORVEN_ANSWER_ATTEMPTS = 2
    settings.QORVEN_ANSWER_RETRY_DELAY = 0.1


def timeline(world) -> list[Message]:
    session = Session.objects.get(tenant=world.tenant_a, user=world.alice, kind="canonical", state="active")
    return list(Message.objects.filter(session=session).order_by("seq"))


def chunk(content: str) -> str:
    """One streamed chunk's JSON, written by hand (`content` as raw JSON string text)."""
    return ('{"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, '
            '"delta": {"content": "%s"}, "finish_reason": null}]}' % content)


def failed_with_a_notice_and_the_next_is_answered(world, ask, model_server, drain, attempts: int = 2) -> Message:
    question = timeline(world)[0]
    assert (question.answer_state, question.answer_attempts) == ("failed", attempts), question.answer_error
    (notice,) = [m for m in timeline(world) if m.role == "system"]
    assert notice.metadata["notice"] == "model_unavailable" and notice.metadata["reply_to"] == question.seq
    model_server.default = None
    model_server.add(reply("Fine now."))
    ask("and now?")
    drain()
    assert [m.content for m in timeline(world) if m.role == "assistant"] == ["Fine now."]
    return question


@pytest.mark.parametrize("events", [
    ["{not json at all"],  # a data line that is not JSON
    [chunk("Hello "), '{"choices": [{"delta": {"content": 7'],  # cut off mid-object
], ids=["not-json", "cut-off"])
def test_a_stream_the_server_garbles_fails_that_message_in_our_words(world, ask, model_server, drain, quick, events):
    model_server.default = Step(raw_events=events)
    ask("hello?")
    drain()
    question = failed_with_a_notice_and_the_next_is_answered(world, ask, model_server, drain)
    assert "could not read" in question.answer_error
    assert len(model_server.requests) == 2 + 1  # two tries of the first message, then the second's


def tool_pieces(tool_calls) -> str:
    """A streamed chunk with some text and `tool_calls` as given (any JSON)."""
    return json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [
        {"index": 0, "delta": {"content": "Hello.", "tool_calls": tool_calls}, "finish_reason": None}]})


@pytest.mark.parametrize("tool_calls", [
    "garbage", 7, ["x"], [{"index": [0], "function": {"name": "save_note"}}],
    [{"index": 0, "function": {"name": 5, "arguments": {"text": "hi"}}}],
], ids=["a-string", "a-number", "not-objects", "a-list-for-index", "no-name"])
def test_tool_call_pieces_of_the_wrong_shape_are_left_out_not_a_crash(world, ask, model_server, drain, tool_calls):
    """They raised out of the stream's reading (AttributeError, TypeError): the turn's task
    crashed, the message stayed pending and the sweeper queued it again and again. A piece
    that is not a tool call is left out, as is a call with no name; the text is the answer."""
    model_server.add(Step(raw_events=[tool_pieces(tool_calls)]))
    ask("hi")
    drain()
    question, *rows = timeline(world)
    assert question.answer_state == "answered"
    assert [(m.role, m.content, m.tool_calls) for m in rows] == [("assistant", "Hello.", None)]
    assert len(model_server.requests) == 1


def test_broken_characters_are_mended_not_a_crash(world, ask, model_server, drain):
    # An emoji sent as its two UTF-16 halves in separate chunks, and a half on its own.
    model_server.add(Step(raw_events=[chunk("Party \\ud83d"), chunk("\\ude00 time"), chunk(" and \\ud800 alone")]))
    ask("party?")
    drain()
    (answer,) = [m for m in timeline(world) if m.role == "assistant"]
    assert answer.content == "Party \U0001F600 time and \ufffd alone"


@pytest.mark.parametrize("text", ["", "  \n "], ids=["empty", "whitespace"])
def test_an_empty_answer_is_not_stored_as_the_reply(world, ask, model_server, drain, quick, text):
    model_server.default = reply(text)
    ask("anything?")
    drain()
    assert not [m for m in timeline(world) if m.role == "assistant"]
    question = failed_with_a_notice_and_the_next_is_answered(world, ask, model_server, drain)
    assert "empty" in question.answer_error


def test_keep_alives_do_not_hold_a_turn_past_its_time_limit(world, ask, model_server, drain, settings):
    settings.QORVEN_MODEL_DEADLINE = 1.0
    settings.QORVEN_ANSWER_ATTEMPTS = 1
    settings.QORVEN_MODEL_RETRIES = 0
    model_server.add(Step(keepalive=4.0, text="Too late."))
    ask("slow one")
    drain()
    question = timeline(world)[0]
    assert question.answer_state == "failed" and "did not finish within" in question.answer_error
    assert not [m for m in timeline(world) if m.role == "assistant"]


def test_stop_is_heard_while_the_server_sends_only_keep_alives(world, ask, model_server, drain):
    from qorven.agent.stop import turn_stop_request
    from qorven.agent.turn_answer import STOPPED_NOTICE

    model_server.add(Step(keepalive=4.0, text="Never seen."))
    ask("think hard")
    session = Session.objects.get(tenant=world.tenant_a, user=world.alice, kind="canonical")

    def stop_soon() -> None:
        deadline = time.monotonic() + 5
        while not model_server.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        turn_stop_request(session_id=session.pk, reply_to=1)

    stopper = threading.Thread(target=stop_soon)
    stopper.start()
    drain()
    stopper.join()
    (answer,) = [m for m in timeline(world) if m.role == "assistant"]
    assert answer.content == STOPPED_NOTICE and answer.metadata.get("stopped") is True


def test_the_calls_retries_end_within_its_time_limit(world, ask, model_server, drain, settings):
    """Each of the SDK's retries waited the whole timeout, whatever the time limit said:
    with a 60 s timeout and 4 retries a person could wait a quarter of an hour."""
    settings.QORVEN_MODEL_TIMEOUT = 0.5
    settings.QORVEN_MODEL_RETRIES = 4
    settings.QORVEN_MODEL_DEADLINE = 1.2
    settings.QORVEN_ANSWER_ATTEMPTS = 1
    model_server.default = reply("Too slow.", delay=3.0)
    ask("anyone?")
    drain()
    assert timeline(world)[0].answer_state == "failed"
    assert 1 < len(model_server.requests) < 1 + 4  # retried, but not past the time limit


def test_llama_cpps_context_size_error_shrinks_the_window_as_a_context_error_does(world, ask, model_server, drain):
    model_server.add(Step(status=400, error={"code": 400, "type": "exceed_context_size_error",
                                             "message": "request (9000 tokens) exceeds the available context size "
                                                        "(8192 tokens), try increasing it"}),
                     reply("Fits now."))
    ask("a long question")
    drain()
    assert [m.content for m in timeline(world) if m.role == "assistant"] == ["Fits now."]
    assert len(model_server.requests) == 2


def test_a_server_asking_for_a_long_wait_gets_the_person_told_at_once(world, ask, model_server, drain):
    """A 429 with Retry-After: 3600 left the message pending, silent, for hours of retries."""
    from ..fakes.model_server import error

    model_server.add(error(429, "slow down", headers={"Retry-After": "3600"}))
    ask("quick question")
    drain()
    question = timeline(world)[0]
    assert question.answer_state == "failed" and len(model_server.requests) == 1
    (notice,) = [m for m in timeline(world) if m.role == "system"]
    assert notice.metadata["notice"] == "rate_limited" and "3600 s" in notice.content


def test_a_reply_tried_again_starts_afresh_on_the_page_not_after_the_failed_tries_text(
    world, ask, model_server, drain, settings
):
    """The page showed "Partial from the first tryThe whole answer." and a page
    reconnecting between the tries was sent the dead text."""
    from asgiref.sync import async_to_sync, sync_to_async

    from qorven.runtime.streams import stream_snapshot

    from ..channels_app.live_helpers import communicator, receive_until, session_cookie

    settings.QORVEN_ANSWER_RETRY_DELAY = 0.3
    model_server.add(Step(raw_events=[chunk("Partial from the first try"), '{"error": {"message": "boom"}}']),
                     reply("The whole answer."))
    cookie = session_cookie(world.alice)
    snapshots = []

    async def scenario():
        page = communicator("/ws/chat/acme/aria/", cookie=cookie)
        assert (await page.connect())[0]
        await receive_until(page, lambda e: e["type"] == "session")
        await sync_to_async(ask)("tell me")
        events = await receive_until(page, lambda e: e["type"] == "message.stream", timeout=20)
        session = await sync_to_async(Session.objects.get)(tenant=world.tenant_a, user=world.alice, kind="canonical")
        snapshots.append(await sync_to_async(stream_snapshot)(session.pk))
        events += await receive_until(page, lambda e: e["type"] == "message.done", timeout=20)
        await page.disconnect()
        return events

    events = async_to_sync(scenario)()
    drain()
    restart = next(i for i, e in enumerate(events) if e["type"] == "message.stream")
    assert events[restart] == {"type": "message.stream", "reply_to": 1, "text": ""}
    before = "".join(e["delta"] for e in events[:restart] if e["type"] == "message.chunk")
    after = "".join(e["delta"] for e in events[restart:] if e["type"] == "message.chunk")
    assert before == "Partial from the first try" and after == "The whole answer.", events
    assert snapshots == [None]  # a page connecting between the tries is sent nothing stale
    assert [m.content for m in timeline(world) if m.role == "assistant"] == ["The whole answer."]


def test_a_stream_that_ends_before_the_answer_does_is_not_taken_for_the_answer(world, ask, model_server, drain, quick):
    """The body ended cleanly after three chunks — no finish_reason, no [DONE]: the
    fragment was stored, and sent to Telegram, as the whole reply."""
    model_server.add(Step(raw_events=[chunk("The complete "), chunk("an")], done=False), reply("The complete answer."))
    ask("what is it?")
    drain()
    assert [m.content for m in timeline(world) if m.role == "assistant"] == ["The complete answer."]
    assert len(model_server.requests) == 2


def test_a_reply_the_models_length_limit_cut_off_is_kept_and_said_to_be_cut(world, ask, model_server, drain):
    """It ended mid-sentence with nothing to say so: a person read half an answer as the whole."""
    model_server.add(Step(text="The three steps are: first, preheat the oven; second,", finish="length"))
    ask("how do I bake it?")
    drain()
    rows = [m for m in timeline(world) if m.role != "user"]
    assert [(m.role, m.metadata.get("notice")) for m in rows] == [("assistant", None), ("system", "cut_off")]
    assert rows[0].content.endswith("second,") and rows[0].metadata.get("cut_off") is True
    assert "length limit" in rows[1].content and rows[1].metadata["reply_to"] == 1
    # The notice is ours, for the person: the next prompt holds the cut reply, not the notice.
    model_server.add(reply("Third, bake it."))
    ask("go on")
    drain()
    sent = json.dumps(model_server.requests[-1]["messages"])
    assert "second," in sent and "length limit" not in sent


def test_a_runaway_reply_is_cut_at_the_reply_limit_and_said_to_be_cut(world, ask, model_server, drain, settings):
    """A model that never stops (no length limit of its own, or a huge one) wrote on and
    on, and a chat on Telegram got it as dozens of messages: the reply stops at
    QORVEN_MAX_REPLY_CHARS, the model's stream is let go, and the notice says it was cut."""
    settings.QORVEN_MAX_REPLY_CHARS = 1000
    model_server.add(Step(text="la " * 20_000, chunk_size=70))
    ask("sing")
    drain()
    rows = [m for m in timeline(world) if m.role != "user"]
    assert [(m.role, m.metadata.get("notice")) for m in rows] == [("assistant", None), ("system", "cut_off")]
    assert rows[0].content == ("la " * 20_000)[:1000] and rows[0].metadata.get("cut_off") is True
    assert "length limit" in rows[1].content


def test_a_runaway_reply_still_running_at_the_time_limit_is_cut_at_the_reply_limit_not_failed(
    world, ask, model_server, drain, settings
):
    """Text with no tag to say what it is goes on being read past the reply limit (a
    closing tag may yet say it was reasoning); a reply that runs on until the time limit
    is the answer, cut at the reply limit, not a model that failed to answer."""
    settings.QORVEN_MAX_REPLY_CHARS = 100
    settings.QORVEN_MODEL_DEADLINE = 1.0
    model_server.add(Step(text="la " * 2_000, chunk_size=30, chunk_delay=0.02))
    ask("sing")
    drain()
    question, *rows = timeline(world)
    assert question.answer_state == "answered" and len(model_server.requests) == 1
    assert [(m.role, m.metadata.get("notice")) for m in rows] == [("assistant", None), ("system", "cut_off")]
    assert rows[0].content == ("la " * 2_000)[:100] and rows[0].metadata.get("cut_off") is True


def test_a_reply_exactly_as_long_as_the_reply_limit_is_whole_and_not_said_to_be_cut(world, ask, model_server, drain,
                                                                                   settings):
    settings.QORVEN_MAX_REPLY_CHARS = 1000
    model_server.add(Step(text="la " * 333 + "l", chunk_size=70))  # 1,000 characters, then the end
    ask("sing")
    drain()
    rows = [m for m in timeline(world) if m.role != "user"]
    assert [(m.role, m.metadata.get("notice")) for m in rows] == [("assistant", None)]
    assert rows[0].content == "la " * 333 + "l" and not rows[0].metadata.get("cut_off")


@pytest.fixture
def save_note():
    """A tool that records what it was asked to save."""
    saved: list[str] = []
    tool = registry.register(Tool("save_note", "Save a note.", {"type": "object", "properties": {"text": {
        "type": "string"}}}, lambda ctx, args: saved.append(args.get("text", "")) or "saved"))
    yield saved
    registry.tools.pop(tool.name)


RUNAWAY = "la " * 100_000  # 300,000 characters of a tool call's arguments


@pytest.mark.parametrize("preamble", ["", "Saving it now."], ids=["no-text", "with-text"])
def test_a_tool_call_whose_arguments_run_away_is_not_run_and_the_reply_is_said_to_be_cut(
        world, ask, model_server, drain, settings, save_note, preamble):
    """A model streaming its arguments on and on (300,000 characters for one call) had them
    all held in memory, stored with the call and the tool run on them. Past
    QORVEN_MAX_REPLY_CHARS the stream is let go, no tool runs, and the turn ends as a reply
    cut at that bound does: what the model wrote before the call, and our notice."""
    settings.QORVEN_MAX_REPLY_CHARS = 1000
    model_server.add(Step(text=preamble, tool_calls=[("save_note", {"text": RUNAWAY})], args_chunk_size=70))
    ask("note down the song")
    drain()

    rows = _assert_cut_with_no_tool_run(world, model_server, save_note, preamble)
    assert all(m.metadata.get("cut_off") for m in rows if m.role == "assistant")


@pytest.mark.parametrize("arguments", ["", '{"text": "buy mi'], ids=["cut-after-its-name", "cut-in-its-arguments"])
@pytest.mark.parametrize("preamble", ["", "Saving it now."], ids=["no-text", "with-text"])
def test_a_tool_call_the_models_length_limit_cut_is_not_run_and_the_reply_is_said_to_be_cut(
        world, ask, model_server, drain, save_note, arguments, preamble):
    """The model's output limit (finish_reason "length") ended the answer inside a tool
    call: the call ran on what had come, `{}` when the limit came right after its name (a
    note, a beat or a memory saved empty). It is not run; the turn ends as a reply cut by
    that limit does, since asking again within the same limit would be cut the same way."""
    model_server.add(Step(text=preamble, tool_calls=[("save_note", arguments)], finish="length"))
    ask("note down the shopping")
    drain()

    _assert_cut_with_no_tool_run(world, model_server, save_note, preamble)


def _assert_cut_with_no_tool_run(world, model_server, save_note, preamble: str) -> list:
    """The turn ended as a reply cut off does: the tool not run, the model asked
    once (no round of tools, no second try), the question answered with what the model
    wrote before the call (`preamble`) and our notice. Returns the rows after the question."""
    assert save_note == []
    assert len(model_server.requests) == 1
    question, *rows = timeline(world)
    assert question.answer_state == "answered"
    stored = [(m.role, m.content, m.metadata.get("notice"), m.tool_calls) for m in rows]
    if preamble:
        assert stored == [("assistant", preamble, None, None), ("system", CUT_OFF_NOTICE, "cut_off", None)]
    else:
        assert stored == [("assistant", CUT_OFF_NOTICE, "cut_off", None)]
    return rows


def test_a_memory_the_length_limit_cut_is_not_saved(world, ask, model_server, drain):
    from memory_app.models import Memory

    model_server.add(Step(tool_calls=[("remember", "")], finish="length"),
                     Step(tool_calls=[("remember", '{"content": "Alice likes')], finish="length"))
    ask("remember my favourite tea")
    drain()
    ask("remember it, please")
    drain()
    assert not Memory.objects.filter(tenant=world.tenant_a).exists()
    assert len(model_server.requests) == 2
    assert [m.content for m in timeline(world) if m.role == "assistant"] == [CUT_OFF_NOTICE] * 2


def test_an_answer_calling_more_tools_than_allowed_runs_none_of_them(world, ask, model_server, drain, settings,
                                                                    save_note):
    settings.QORVEN_MAX_TOOL_CALLS = 3
    model_server.add(Step(tool_calls=[("save_note", {"text": f"note {i}"}) for i in range(5)]))
    ask("note down five things")
    drain()

    assert save_note == []
    assert len(model_server.requests) == 1
    assert [(m.role, m.content) for m in timeline(world)[1:]] == [("assistant", CUT_OFF_NOTICE)]


def test_tool_calls_within_the_bounds_run_as_before(world, ask, model_server, drain, settings, save_note):
    settings.QORVEN_MAX_REPLY_CHARS = 1000
    settings.QORVEN_MAX_TOOL_CALLS = 3
    text = "x" * 970  # with its JSON around it and the tool's name, 991 characters
    model_server.add(Step(tool_calls=[("save_note", {"text": text})] * 3, args_chunk_size=70), reply("Saved."))
    ask("note these down")
    drain()

    assert save_note == [text] * 3
    assert [m.content for m in timeline(world) if m.role == "assistant"][-1] == "Saved."


def test_one_endless_event_is_let_go_at_the_bound_not_read_whole(world, ask, model_server, drain, settings,
                                                                save_note):
    """The SDK reads a server-sent event whole, however long, before we see any of it: a
    server sending one chunk of 48 MB (a tool call's arguments, or a line that never ends)
    had all of it read into memory. Reading stops once an event has run far past what the
    bound could need, and the turn ends as a cut reply."""
    settings.QORVEN_MAX_REPLY_CHARS = 1000
    huge = json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {
        "tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                        "function": {"name": "save_note", "arguments": "a" * 48_000_000}}]}}]})
    model_server.add(Step(raw_events=[huge]))
    ask("note it down")
    drain()

    assert save_note == []
    # 48 MB is more than the sockets' buffers hold: we stopped reading. The fake's writing
    # thread learns it when its next write fails, which may come after the turn's end.
    deadline = time.monotonic() + 30
    while model_server.cut_streams == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert model_server.cut_streams == 1
    assert [(m.role, m.content) for m in timeline(world)[1:]] == [("assistant", CUT_OFF_NOTICE)]
def finished(reason: str = "stop", **fields) -> str:
    """The stream's last chunk: the finish reason, and any other top-level fields (usage)."""
    return json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": reason}], **fields})


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": -500, "completion_tokens": -9000},
    {"prompt_tokens": 10**19, "completion_tokens": 10**19},
    {"prompt_tokens": "12", "completion_tokens": None},
], ids=["negative", "beyond-any-counter", "not-numbers"])
def test_a_usage_count_that_makes_no_sense_is_estimated_and_the_reply_kept(world, ask, model_server, drain, usage):
    """The reply streamed in, then storing the server's count failed (a negative count
    refused by the table, one past its integers, a string): the turn crashed, the reply
    was lost, the message waited unanswered and the model was asked again at the next
    message, as many times as the server kept counting so."""
    from tenancy.models import Usage

    model_server.add(Step(raw_events=[chunk("The answer."), finished(usage=usage)]))
    ask("what is it?")
    drain()
    question, answer = timeline(world)
    assert (question.answer_state, answer.content) == ("answered", "The answer.")
    assert "tokens" not in answer.metadata  # not the server's count: it made none that could be
    (spent,) = Usage.objects.filter(tenant=world.tenant_a)
    assert spent.calls == 1 and 0 < spent.prompt_tokens < 10_000 and 0 < spent.completion_tokens < 100
    assert len(model_server.requests) == 1


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", '"now"', ""],
                         ids=["not-json", "an-array", "a-string", "empty"])
def test_a_tool_call_whose_arguments_are_not_an_object_does_not_break_the_conversation(
    world, ask, model_server, drain, arguments
):
    """Ollama reads every tool call of the history back as an object and refuses the whole
    request when one is not: the call was stored and replayed as the model wrote it, so
    the rest of that turn and every later message got "The model refused to answer this
    message" until the call left the window."""
    from ..fakes.model_server import tool_call

    model_server.tool_arguments_checked = True
    model_server.add(tool_call("current_time", arguments), reply("It is noon."), reply("Still here."))
    ask("what time is it?")
    drain()
    ask("are you there?")
    drain()
    assert [m.content for m in timeline(world) if m.role in ("assistant", "system") and not m.tool_calls] == [
        "It is noon.", "Still here."]
    assert len(model_server.requests) == 3
    if arguments:  # the model was told what was wrong with its call
        assert "error" in json.loads(model_server.requests[1]["messages"][-1]["content"])


def calling(*calls: dict) -> str:
    """A chunk of tool-call deltas, written as the server sends them."""
    return json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m",
                       "choices": [{"index": 0, "delta": {"tool_calls": list(calls)}, "finish_reason": None}]})


def call(name: str | None, arguments: str, **fields) -> dict:
    function = {"arguments": arguments} if name is None else {"name": name, "arguments": arguments}
    return {**fields, "type": "function", "function": function}


@pytest.mark.parametrize("events", [
    # Each call whole in a chunk of its own, with no index (Gemini's OpenAI endpoint, mistral.rs).
    [calling(call("current_time", "{}", id="a1")), calling(call("memory_search", '{"query": "keys"}', id="b2"))],
    # Every call at index 0 (Ollama through LiteLLM, some vLLM parsers), each with its id.
    [calling(call("current_time", "{}", id="a1", index=0)),
     calling(call("memory_search", '{"query": ', id="b2", index=0)), calling(call(None, '"keys"}', index=0))],
    # Both in one chunk, neither with an index.
    [calling(call("current_time", "{}", id="a1"), call("memory_search", '{"query": "keys"}', id="b2"))],
], ids=["no-index", "all-at-index-0", "one-chunk-no-index"])
def test_parallel_tool_calls_a_server_does_not_number_are_each_run(world, ask, model_server, drain, events):
    """They were joined into one call, "current_timememory_search" with arguments
    '{}{"query": "keys"}', which no tool answers: neither ran, and the model was told it
    had called a tool that does not exist."""
    model_server.add(Step(raw_events=[*events, finished("tool_calls")]), reply("It is noon; nothing on keys."))
    ask("what time is it, and where are my keys?")
    drain()
    results = [m for m in timeline(world) if m.role == "tool"]
    assert [(m.metadata["tool"], m.tool_call_id) for m in results] == [("current_time", "a1"), ("memory_search", "b2")]
    assert not any("error" in json.loads(m.content) for m in results)
    assert timeline(world)[-1].content == "It is noon; nothing on keys."


def test_tool_calls_given_one_id_are_told_apart(world, ask, model_server, drain):
    """Two calls with the same id got two results with that id: the model could not tell
    which result answered which call."""
    model_server.add(Step(raw_events=[
        calling(call("current_time", "{}", id="call_1", index=0), call("memory_search", '{"query": "x"}', id="call_1",
                                                                        index=1)),
        finished("tool_calls")]), reply("Done."))
    ask("both please")
    drain()
    (calls,) = [m.tool_calls for m in timeline(world) if m.tool_calls]
    ids = [c["id"] for c in calls]
    assert len(set(ids)) == 2
    assert [m.tool_call_id for m in timeline(world) if m.role == "tool"] == ids


LOGIN_PAGE = b"<!doctype html><html><head><title>Sign in - Gateway</title></head><body>Sign in</body></html>"


def test_a_server_answering_with_a_web_page_is_said_to_need_fixing_at_once(world, ask, model_server, drain):
    """A base URL that reaches a web page (a sign-in page in front of the server, a web
    interface instead of its API) answers 200 with HTML: that was read as an answer cut
    short, tried again and again, and the person was told after minutes that the model
    "isn't answering right now" and to send /retry, which cannot help."""
    model_server.default = Step(body=LOGIN_PAGE, content_type="text/html; charset=utf-8")
    ask("hello?")
    drain()
    question, notice = timeline(world)
    assert question.answer_state == "failed" and "web page" in question.answer_error
    assert notice.metadata["notice"] == "model_misconfigured" and "/retry" not in notice.content
    assert "Sign in" not in notice.content and "Gateway" not in notice.content
    assert len(model_server.requests) == 1


def whole(message: dict, **fields) -> Step:
    """A whole chat completion as JSON, whatever was asked (a server that ignores `stream`)."""
    completion = {"id": "x", "object": "chat.completion", "model": "m", **fields,
                  "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}]}
    return Step(body=json.dumps(completion).encode(), content_type="application/json")


def test_a_server_that_ignores_stream_and_answers_whole_is_read(world, ask, model_server, drain):
    """The answer came whole as JSON instead of streamed: no event in it, so it was taken
    for an answer cut short, tried again, and the message failed with "isn't answering"."""
    from tenancy.models import Usage

    model_server.add(
        whole({"content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "current_time", "arguments": ""}},
            {"id": "t2", "type": "function", "function": {"name": "memory_search", "arguments": '{"query": "x"}'}}]}),
        whole({"content": "It is noon."}, usage={"prompt_tokens": 120, "completion_tokens": 4, "total_tokens": 124}),
    )
    ask("what time is it?")
    drain()
    rows = timeline(world)
    assert [m.metadata.get("tool") for m in rows if m.role == "tool"] == ["current_time", "memory_search"]
    assert rows[-1].content == "It is noon." and rows[0].answer_state == "answered"
    assert rows[-1].metadata.get("tokens") == 4
    assert Usage.objects.get(tenant=world.tenant_a).completion_tokens > 4  # both calls counted
    assert len(model_server.requests) == 2


@pytest.mark.parametrize("content_type", ["text/plain", "application/json"])
def test_a_stream_labelled_with_another_type_is_read(world, ask, model_server, drain, content_type):
    model_server.add(reply("Streamed all the same.", content_type=content_type))
    ask("hi")
    drain()
    assert [m.content for m in timeline(world) if m.role == "assistant"] == ["Streamed all the same."]


def test_a_reply_the_providers_content_filter_stopped_is_kept_and_said_to_be_stopped(world, ask, model_server, drain):
    """Azure OpenAI's filter (and others) can stop an answer partway with finish_reason
    content_filter: the part before was stored and sent as if it were the whole reply."""
    model_server.add(Step(text="The story begins on a dark night, when", finish="content_filter"))
    ask("tell me a story")
    drain()
    rows = [m for m in timeline(world) if m.role != "user"]
    assert [(m.role, m.metadata.get("notice")) for m in rows] == [("assistant", None), ("system", "withheld")]
    assert rows[0].content.endswith("when") and rows[0].metadata.get("withheld") is True
    assert "content filter" in rows[1].content and "length limit" not in rows[1].content
    assert rows[1].metadata["reply_to"] == 1


def test_a_connection_reset_in_the_middle_of_a_chunk_is_tried_again(world, ask, model_server, drain, quick):
    model_server.add(Step(raw_events=[chunk("The first half")], reset=True), reply("The whole answer."))
    ask("tell me")
    drain()
    assert [m.content for m in timeline(world) if m.role == "assistant"] == ["The whole answer."]
    assert timeline(world)[0].answer_state == "answered" and len(model_server.requests) == 2


def test_an_answer_trickling_in_a_byte_at_a_time_ends_at_the_time_limit_with_our_notice(
    world, ask, model_server, drain, settings
):
    settings.QORVEN_MODEL_DEADLINE = 1.0
    settings.QORVEN_ANSWER_ATTEMPTS = 1
    model_server.add(Step(text="An answer that takes far too long to arrive.", byte_delay=0.05))
    ask("slowly")
    drain()
    question, notice = timeline(world)
    assert question.answer_state == "failed" and "did not finish within 1s" in question.answer_error
    assert notice.metadata["notice"] == "model_unavailable" and "far too long" not in notice.content


def test_lm_studio_reached_without_v1_is_said_to_need_fixing_at_once(world, ask, model_server, drain):
    """LM Studio answers a path it does not serve (its base URL given without /v1) with
    200 and {"error": "Unexpected endpoint or method. …"}: that was taken for an empty
    answer, tried again for minutes, and the person told to send /retry."""
    model_server.default = Step(body=b'{"error":"Unexpected endpoint or method. (POST /chat/completions)"}',
                                content_type="application/json; charset=utf-8")
    ask("hello?")
    drain()
    question, notice = timeline(world)
    assert question.answer_state == "failed" and "Unexpected endpoint or method" in question.answer_error
    assert notice.metadata["notice"] == "model_misconfigured" and "Unexpected" not in notice.content
    assert len(model_server.requests) == 1


def test_an_error_a_server_reports_with_200_and_a_5xx_code_is_tried_again(world, ask, model_server, drain, quick):
    model_server.add(Step(body=b'{"error": {"code": 503, "message": "model is loading"}}',
                          content_type="application/json"), reply("Loaded now."))
    ask("hello?")
    drain()
    assert [m.content for m in timeline(world) if m.role != "user"] == ["Loaded now."]


@pytest.mark.parametrize("events", [
    [chunk("<think>First, the oven. Then the tray. Then"), finished("length")],
    [json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [
        {"index": 0, "delta": {"reasoning_content": "First, the oven. Then"}, "finish_reason": None}]}),
     finished("length")],
], ids=["think-tags", "reasoning-content"])
def test_a_model_that_spends_its_length_limit_thinking_is_said_to_be_cut_at_once(world, ask, model_server, drain,
                                                                              events):
    """A reasoning model whose output limit ran out inside its reasoning sent no answer
    text: that was taken for an empty answer, tried again (the same again, each time) and
    ended in "isn't answering… /retry". It is the length limit: said so at once."""
    model_server.add(Step(raw_events=events))
    ask("how do I bake it?")
    drain()
    question, *rows = timeline(world)
    assert question.answer_state == "answered" and len(model_server.requests) == 1
    assert [(m.role, m.content, m.metadata.get("notice")) for m in rows] == [
        ("assistant", CUT_OFF_NOTICE, "cut_off")]
    assert "oven" not in json.dumps([m.content for m in rows])


def test_a_tool_call_stored_with_broken_arguments_before_the_fix_does_not_break_the_conversation(
    world, ask, model_server, drain
):
    """Calls stored before arguments were kept as objects went back as written: on Ollama
    every message of that conversation was refused until the call left the window."""
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="what time is it?", channel="web")
    message_append(session=session, role="assistant", content="", channel="web", tool_calls=[
        {"id": "call_0", "type": "function", "function": {"name": "current_time", "arguments": "{not json"}}])
    message_append(session=session, role="tool", content='{"error": "arguments are not valid JSON"}',
                   channel="web", tool_call_id="call_0")
    message_append(session=session, role="assistant", content="It is noon.", channel="web")
    model_server.tool_arguments_checked = True
    model_server.add(reply("Still here."))
    ask("are you there?")
    drain()
    assert timeline(world)[-1].content == "Still here."
    (sent,) = [m for m in model_server.requests[0]["messages"] if m.get("tool_calls")]
    assert sent["tool_calls"][0]["function"] == {"name": "current_time", "arguments": "{}"}
