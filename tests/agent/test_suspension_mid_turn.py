"""The host suspends a workspace while a turn of it runs: what the model writes after that
is neither stored as an answer nor sent, nor is any tool run for it, in a person's chat as
in a group's; the message ends unanswered, marked so for the admin."""
from __future__ import annotations

import time

import pytest

from channels_app.webhook_ingest import group_commit
from sessions_app.models import Message
from tenancy.services import tenant_suspend
from tenancy.tool_registry import Tool, registry
from tenancy.trust import Trust

from ..channels_app.conftest import pair, telegram  # noqa: F401 (a fixture)
from ..channels_app.payloads import post_telegram, telegram_update
from ..fakes.model_server import reply, tool_call
from .test_membership_mid_turn import HeldModel

pytestmark = pytest.mark.django_db(transaction=True)

SENT = r"/telegram/bot111:AAA/sendMessage"
GROUP = dict(chat_id=-1009, chat_type="supergroup")


@pytest.fixture
def post_note():
    """A tool anyone may have run (a group's too), recording every run."""
    runs: list[str] = []
    tool = registry.register(Tool("post_note", "Post a note to the family board.", {"type": "object", "properties": {}},
                                  lambda ctx, args: runs.append(ctx.channel) or "posted", Trust.PUBLIC))
    yield runs
    registry.tools.pop(tool.name)


def suspended_while_held(client, world, model_server, drain, update: dict, first, *, then: dict | None = None):
    """`update` reaches the bot; the workspace is suspended while the model writes `first`
    (and `then`, a second update, waits for its turn meanwhile)."""
    held = HeldModel(first, reply("Done."))
    model_server.default = held
    assert post_telegram(client, update).status_code == 200
    assert group_commit.flush(10)
    assert held.arrived.wait(30), "the turn never called the model"
    if then is not None:  # stored while the workspace is served, waiting behind the held turn
        assert post_telegram(client, then).status_code == 200
        assert group_commit.flush(10)
        deadline = time.monotonic() + 30
        while not Message.objects.filter(tenant=world.tenant_a, content=then["message"]["text"]).exists():
            assert time.monotonic() < deadline, "the second message was never stored"
            time.sleep(0.05)
    tenant_suspend(tenant=world.tenant_a)
    held.release.set()
    drain()
    return Message.objects.filter(tenant=world.tenant_a, role="user").order_by("seq").first()


def test_a_reply_written_while_the_workspace_was_suspended_is_not_stored_nor_sent(
        client, world, telegram, platform, model_server, drain):  # noqa: F811
    pair(world, "telegram", "42", world.alice)
    question = suspended_while_held(client, world, model_server, drain, telegram_update("what is on today?"),
                                    reply("Three meetings."))

    assert platform.sent(SENT) == []
    assert question.answer_state == "failed" and "suspended" in question.answer_error
    assert list(Message.objects.filter(session=question.session).exclude(pk=question.pk)) == []


def test_a_groups_reply_written_while_the_workspace_was_suspended_is_not_stored_nor_sent(
        client, world, telegram, platform, model_server, drain):  # noqa: F811
    pair(world, "telegram", "42", world.alice)
    question = suspended_while_held(client, world, model_server, drain,
                                    telegram_update("@aria_bot what is on today?", **GROUP),
                                    reply("Three meetings."),
                                    then=telegram_update("@aria_bot and tomorrow?", message_id=2, **GROUP))

    assert platform.sent(SENT) == [] and len(model_server.requests) == 1  # the second never reached the model
    asked = Message.objects.filter(session=question.session).order_by("seq")
    assert [(m.role, m.content, m.answer_state) for m in asked] == [
        ("user", "@aria_bot what is on today?", "failed"), ("user", "@aria_bot and tomorrow?", "failed")]
    assert all("suspended" in m.answer_error for m in asked)


def test_a_tool_the_model_asked_for_while_the_workspace_was_suspended_is_not_run(
        client, world, telegram, platform, model_server, drain, post_note):  # noqa: F811
    pair(world, "telegram", "42", world.alice)
    question = suspended_while_held(client, world, model_server, drain,
                                    telegram_update("@aria_bot post 'milk' on the board", **GROUP),
                                    tool_call("post_note", {}))

    assert post_note == [] and platform.sent(SENT) == []
    assert question.answer_state == "failed"
    assert list(Message.objects.filter(session=question.session).exclude(pk=question.pk)) == []


def test_a_prompt_too_long_for_the_model_is_not_tried_again_once_the_workspace_is_suspended(world, model_server,
                                                                                          drain):
    """The provider said the prompt was too long after the host suspended the workspace:
    the turn compacted and asked the model again, on the suspended workspace's tokens."""
    from qorven.agent.gateway import inbound_accept
    from sessions_app.services.resolve import session_resolve
    from tenancy.trust import Trust

    from ..fakes.model_server import error

    held = HeldModel(error(400, "This model's maximum context length is 8192 tokens", code="context_length_exceeded"),
                     reply("Fits now."))
    model_server.default = held
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    question = inbound_accept(session=chat, content="a question that does not fit", channel="web",
                              sender_name="Alice", trust=Trust.OWNER).message
    assert held.arrived.wait(30), "the turn never called the model"
    tenant_suspend(tenant=world.tenant_a)
    held.release.set()
    drain()

    question.refresh_from_db()
    assert len(model_server.requests) == 1
    assert question.answer_state == "failed" and "suspended" in question.answer_error
