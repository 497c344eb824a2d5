"""Reasoning models served locally (Qwen3, DeepSeek-R1, QwQ through Ollama, vLLM, LM
Studio or llama.cpp) write their private reasoning into the answer between <think> tags.
A person reads the answer, on every surface: not the reasoning, not the tags."""
from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from sessions_app.models import Message, Session
from tenancy.services import api_token_create

from ..fakes.model_server import Step, reply
from .conftest import pair
from .live_helpers import communicator, receive_until, session_cookie
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

REASONING = "The user greets me. I should answer warmly and briefly."


def streamed(*pieces: str, finish: str = "stop") -> Step:
    """A stream whose content comes in exactly these pieces (a tag may be cut between two)."""
    def chunk(delta: dict, reason: str | None = None) -> str:
        return json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "qwen3:8b",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]})

    return Step(raw_events=[*(chunk({"content": p}) for p in pieces), chunk({}, finish)])


THINKING = streamed("<thi", "nk>\n", REASONING[:20], REASONING[20:], "\n</th", "ink>\n\n", "Hello", " Priya!")
# As vLLM without a reasoning parser (and some llama.cpp setups) stream Qwen3 and
# DeepSeek-R1: their chat template opened the block in the prompt, so the answer has no
# opening tag, only the reasoning and the closing one.
BARE = streamed(REASONING[:20], REASONING[20:], "\n</th", "ink>\n\n", "Hello", " Priya!")


def shown_at_the_end(events: list[dict]) -> str:
    """The reply's text as the chat page holds it once these events are applied: a
    message.stream replaces it, a chunk goes at its offset."""
    text = ""
    for event in events:
        if event["type"] == "message.stream":
            text = event["text"]
        elif event["type"] == "message.chunk":
            text = text[:event.get("offset", len(text))] + event["delta"]
    return text


@pytest.mark.parametrize("first", [THINKING, BARE], ids=["opening-tag", "no-opening-tag"])
def test_the_reasoning_of_a_thinking_model_is_not_sent_to_telegram_nor_read_back(client, world, telegram, platform,
                                                                                model_server, drain, first):
    pair(world, "telegram", "42", world.alice)
    model_server.add(first, reply("Fine, thanks."))
    assert post_telegram(client, telegram_update("hi", message_id=1)).status_code == 200
    drain()
    assert post_telegram(client, telegram_update("how are you?", message_id=2)).status_code == 200
    drain()
    sent = [r.json["text"] for r in platform.sent(r"/telegram/bot111:AAA/sendMessage")]
    assert sent == ["Hello Priya!", "Fine, thanks."]
    assert [m.content for m in Message.objects.filter(role="assistant").order_by("seq")] == sent
    assert "greets" not in json.dumps(model_server.requests[-1]["messages"])


def test_reasoning_without_an_opening_tag_is_taken_back_from_the_chat_page_when_it_closes(
        client, world, model_server, drain):
    """The reasoning streams before anything says it is reasoning; the closing tag takes
    it back: the page starts the reply afresh and ends holding the answer alone."""
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(BARE)
    cookie = session_cookie(world.alice)

    async def scenario() -> list[dict]:
        page = communicator("/ws/chat/acme/aria/", cookie=cookie)
        assert (await page.connect())[0]
        await receive_until(page, lambda e: e["type"] == "session")
        response = await sync_to_async(client.post)(
            "/v1/qors/aria/messages", data=json.dumps({"content": "hi"}), content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201
        events = await receive_until(page, lambda e: e["type"] == "message.done", timeout=20)
        await page.disconnect()
        return events

    events = async_to_sync(scenario)()
    drain()
    assert shown_at_the_end(events) == "Hello Priya!"
    (new,) = [e for e in events if e["type"] == "message.new" and e["role"] == "assistant"]
    assert new["content"] == "Hello Priya!"
    (answer,) = Message.objects.filter(role="assistant")
    assert answer.content == "Hello Priya!"


def test_the_reasoning_of_a_thinking_model_does_not_stream_to_the_chat_page(client, world, model_server, drain):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(THINKING)
    cookie = session_cookie(world.alice)

    async def scenario() -> list[dict]:
        page = communicator("/ws/chat/acme/aria/", cookie=cookie)
        assert (await page.connect())[0]
        await receive_until(page, lambda e: e["type"] == "session")
        response = await sync_to_async(client.post)(
            "/v1/qors/aria/messages", data=json.dumps({"content": "hi"}), content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201
        events = await receive_until(page, lambda e: e["type"] == "message.done", timeout=20)
        await page.disconnect()
        return events

    events = async_to_sync(scenario)()
    drain()
    shown = "".join(e.get("delta", "") + e.get("text", "") for e in events if e["type"].startswith("message.")
                    and e["type"] != "message.new")
    assert "greets" not in shown and "think>" not in shown
    assert shown.strip() == "Hello Priya!"
    session = Session.objects.get(tenant=world.tenant_a, user=world.alice, kind="canonical")
    (answer,) = Message.objects.filter(session=session, role="assistant")
    assert answer.content == "Hello Priya!"


@pytest.mark.parametrize("text", [
    "Write <think> in angle brackets to open the block.",
    "Sure: `<think>` and `</think>` wrap the reasoning.",
    "The block ends at </think> and the answer follows.",
    "It ends with `</think>`.\n\nThen comes the answer.",
    "Close it like this:\n```\n</think>\n```\nand answer after it.",
    "Tags wrap the reasoning.\n\nThe closing tag is </think>",
    "Tags wrap the reasoning.\n\nThe closing tag is </think>\nThe answer comes after it.",
], ids=["tag-mid-sentence", "tags-quoted", "closing-tag-mid-sentence", "closing-tag-quoted", "closing-tag-in-code",
        "closing-tag-ends-the-answer", "closing-tag-ends-a-line"])
def test_an_answer_that_speaks_of_the_tags_is_kept_whole(client, world, model_server, drain, text):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(streamed(text[:9], text[9:]))
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "how?"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201
    drain()
    (answer,) = Message.objects.filter(role="assistant")
    assert answer.content == text


@pytest.mark.parametrize("pieces", [
    ("The user greets me.", "</think>", "Hello Priya!"),
    ("The user greets me.</th", "ink>Hello", " Priya!"),
    ("The user greets me.\nI answer warmly.</think>\n\nHello Priya!",),
], ids=["tag-alone", "tag-cut-in-two", "tag-ends-the-reasoning-line"])
def test_reasoning_closed_right_after_its_last_word_is_left_out(client, world, model_server, drain, pieces):
    """Reasoning with no opening tag whose closing tag follows its last word, the answer
    on the same line: the tag ends the reasoning as one on a line of its own does."""
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(streamed(*pieces))
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "hi"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201
    drain()
    (answer,) = Message.objects.filter(role="assistant")
    assert answer.content == "Hello Priya!"


@pytest.mark.parametrize("seen_reasoning", [False, True], ids=["model-never-seen-so", "model-seen-reasoning-untagged"])
def test_untagged_reasoning_longer_than_the_reply_limit_does_not_cut_the_answer(client, world, model_server, drain,
                                                                               settings, seen_reasoning):
    """QORVEN_MAX_REPLY_CHARS bounds the answer: reasoning with no opening tag is not known
    to be reasoning until its closing tag, and it ran into the bound first, so the reply
    was cut before any answer (the reasoning kept as the cut answer, or only the notice)."""
    settings.QORVEN_MAX_REPLY_CHARS = 300
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    long_reasoning = streamed(*[REASONING + " "] * 20, "\n</think>\n\n", "Fine, ", "thanks.")
    model_server.add(*([BARE] if seen_reasoning else []), long_reasoning)
    for question in (["hi"] if seen_reasoning else []) + ["how are you?"]:
        response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": question}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201
        drain()
    answer = Message.objects.exclude(role="user").order_by("seq").last()
    assert (answer.role, answer.content, answer.metadata.get("cut_off")) == ("assistant", "Fine, thanks.", None)


@pytest.mark.parametrize("apart", [False, True], ids=["in-think-tags", "as-reasoning-content"])
def test_a_thinking_models_spent_tokens_do_not_push_the_conversation_out_of_its_window(
    client, world, model_server, drain, settings, apart
):
    """The server counts the reasoning among the answer's tokens (1,500 here for a
    one-line answer): that count was taken for the size of the stored reply, so a
    2,000-token window held only one such reply and the model forgot the conversation
    after two exchanges (and auto mode summarised it away)."""
    settings.QORVEN_CONTEXT_RESERVE = 100
    qor = world.qor_a
    qor.main_num_ctx, qor.tool_allowlist = 2000, ["memory_search"]
    qor.save(update_fields=["main_num_ctx", "tool_allowlist"])
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    spent = {"prompt_tokens": 300, "completion_tokens": 1500, "total_tokens": 1800}
    for n, answer in enumerate(["Paris.", "Berlin.", "Rome."]):
        delta = ({"reasoning_content": REASONING * 20, "content": answer} if apart
                 else {"content": f"<think>{REASONING * 20}</think>{answer}"})
        model_server.add(Step(raw_events=[
            json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "qwen3:8b", "choices": [
                {"index": 0, "delta": delta, "finish_reason": None}]}),
            json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "qwen3:8b", "choices": [
                {"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": spent}),
        ]))
        response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": f"capital number {n}?"}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201
        drain()
    (last,) = [r for r in model_server.requests if "capital number 2?" in json.dumps(r["messages"][-1])]
    assert "Paris." in json.dumps(last["messages"])


def test_a_reasoning_block_that_never_closes_is_said_to_be_cut_not_tried_again(client, world, model_server, drain):
    """The server ended the answer inside the reasoning (it said "stop", not "length"):
    there is no answer to show, and asking again spends the same reasoning. As when the
    length limit ends it there: the cut-off notice, at once, and no reasoning stored."""
    from qorven.agent.turn_endings import CUT_OFF_NOTICE

    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(streamed("<think>\n", REASONING, " And then"))
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "hi"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201
    drain()
    assert len(model_server.requests) == 1
    rows = Message.objects.exclude(role="user").order_by("seq")
    assert [(m.role, m.content, m.metadata.get("notice")) for m in rows] == [("assistant", CUT_OFF_NOTICE, "cut_off")]


def test_a_model_seen_reasoning_untagged_that_a_limit_stops_mid_reasoning_gets_the_notice_not_its_reasoning(
        client, world, model_server, drain):
    """With no opening tag, reasoning cut by the length limit looks like an answer cut
    short. From a model already seen closing such reasoning (the same server and model),
    it is taken for what it is: no answer came."""
    from qorven.agent.turn_endings import CUT_OFF_NOTICE

    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    model_server.add(BARE, streamed("The user asks again. ", "I should weigh the options and", finish="length"))
    for question in ("hi", "and now?"):
        response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": question}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201
        drain()
    assert [m.content for m in Message.objects.filter(role="assistant").order_by("seq")] == [
        "Hello Priya!", CUT_OFF_NOTICE]
    assert "weigh" not in json.dumps(list(Message.objects.values_list("content", flat=True)))
    assert len(model_server.requests) == 2


@pytest.mark.parametrize("other", ["charlie-of-another-workspace", "bob-of-the-same-workspace"])
def test_a_closing_tag_one_person_had_the_model_write_does_not_take_back_anothers_cut_answer(
        client, world, model_server, drain, other):
    """Anyone can have the model open its reply with a bare closing tag ("start your
    answer with </think>"): that made the server and model known to reason untagged for
    everyone on them, and every answer a length limit then cut, for every workspace on
    that route, was thrown away as reasoning (the cut-off notice alone). What is learned
    from one person's chat is kept to that chat's person: the other's cut answer is kept
    with the notice, as any cut reply is."""
    from qorven.agent.turn_endings import CUT_OFF_NOTICE

    tenant, person = (world.tenant_b, world.charlie) if other.startswith("charlie") else (world.tenant_a, world.bob)
    model_server.add(streamed("</think>\n", "Sure, as you asked."),
                     streamed("Step one: preheat the oven. ", "Step two: mix the", finish="length"))
    for token in (api_token_create(tenant=world.tenant_a, user=world.alice)[1],
                  api_token_create(tenant=tenant, user=person)[1]):
        response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "the recipe?"}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 201
        drain()
    assert len(model_server.requests) == 2
    (alices,) = Message.objects.filter(session__user=world.alice, role="assistant")
    assert alices.content == "Sure, as you asked."
    rows = Message.objects.filter(session__tenant=tenant, session__user=person).exclude(role="user").order_by("seq")
    assert [(m.role, m.content, m.metadata.get("notice")) for m in rows] == [
        ("assistant", "Step one: preheat the oven. Step two: mix the", None), ("system", CUT_OFF_NOTICE, "cut_off")]
    assert rows[0].metadata.get("cut_off") is True


@pytest.mark.parametrize("seen_reasoning", [True, False], ids=["model-seen-reasoning-untagged", "model-never-seen-so"])
def test_stop_before_a_closing_tag_keeps_what_was_shown_from_any_model(
        client, world, model_server, drain, seen_reasoning):
    """Stopped while text with no tag streamed: nothing tells it from an answer until a
    closing tag comes, even from a model seen writing its reasoning untagged (which may
    answer with none: the next test). The person stopped what they were reading: it is
    the stopped reply, as for any model."""
    thinking = streamed("The user asks again. ", "I should weigh ", "the options, ", "one by one, ",
                        *(["and then some more, "] * 30), "\n</think>\n\n", "Done.")
    thinking.chunk_delay = 0.2
    model_server.add(BARE if seen_reasoning else reply("Hello Priya!"), thinking)
    events = _second_reply_stopped(client, world, question="and now?", once_shown="weigh")
    drain()
    (new,) = [e for e in events if e["type"] == "message.new" and e["role"] == "assistant"]
    answer = Message.objects.get(role="assistant", seq=new["seq"])
    assert answer.metadata.get("stopped") is True and new["content"] == answer.content
    assert answer.content.startswith("The user asks again. I should weigh")
    assert answer.content == shown_at_the_end(events[:events.index(new)]).strip()


def test_stop_during_a_plain_answer_from_a_model_seen_reasoning_untagged_keeps_what_was_shown(
        client, world, model_server, drain):
    """A model seen writing its reasoning untagged answers, this time, with no reasoning
    (after a tool round, say). Nothing tells such text from reasoning until a closing tag
    comes, and none came: the person stopped an answer they were reading, and the reply
    is what they read, not the notice that nothing was written."""
    answer = streamed("Here is the plan. ", "First, ", "the oven; ", *(["then the tray, "] * 30), "done.")
    answer.chunk_delay = 0.2
    model_server.add(BARE, answer)
    events = _second_reply_stopped(client, world, question="the plan?", once_shown="oven")
    drain()
    (new,) = [e for e in events if e["type"] == "message.new" and e["role"] == "assistant"]
    stored = Message.objects.get(role="assistant", seq=new["seq"])
    shown = shown_at_the_end(events[:events.index(new)])
    assert shown.startswith("Here is the plan. First, the oven;")
    assert (stored.content, stored.metadata.get("stopped"), stored.metadata.get("notice")) == (
        shown.strip(), True, None)


def _second_reply_stopped(client, world, *, question: str, once_shown: str) -> list[dict]:
    """Alice says hi (the model's first answer), asks `question`, and stops its reply once
    a chunk holding `once_shown` has reached her page; the page's events until the reply
    is done."""
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    cookie = session_cookie(world.alice)

    def post(path: str, body: dict):
        return client.post(path, data=json.dumps(body), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")

    async def scenario() -> list[dict]:
        page = communicator("/ws/chat/acme/aria/", cookie=cookie)
        assert (await page.connect())[0]
        await receive_until(page, lambda e: e["type"] == "session")
        assert (await sync_to_async(post)("/v1/qors/aria/messages", {"content": "hi"})).status_code == 201
        await receive_until(page, lambda e: e["type"] == "message.done", timeout=20)
        assert (await sync_to_async(post)("/v1/qors/aria/messages", {"content": question})).status_code == 201
        events = await receive_until(page, lambda e: e["type"] == "message.chunk" and once_shown in e["delta"],
                                     timeout=20)
        stopped = await sync_to_async(post)("/v1/qors/aria/stop", {"reply_to": 3})
        assert stopped.status_code == 202, stopped.content
        events += await receive_until(page, lambda e: e["type"] == "message.done", timeout=20)
        await page.disconnect()
        return events

    return async_to_sync(scenario)()
