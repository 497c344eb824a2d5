"""A person's membership changes while their turn runs: the tools the model calls after
that run as the person is now, not as they were when the turn began, and an answer
reaches them only while they are still a member."""
from __future__ import annotations

import threading

import pytest

from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve
from tenancy.models import Membership
from tenancy.tool_registry import Tool, registry
from tenancy.trust import Trust

from ..fakes.model_server import reply, tool_call

pytestmark = pytest.mark.django_db(transaction=True)


class HeldModel:
    """Answers the first main call with `first` only once `release` is set (the turn is
    mid-call meanwhile: `arrived` says so), then `then` for every call after."""

    def __init__(self, first, then) -> None:
        self.first, self.then = first, then
        self.arrived, self.release = threading.Event(), threading.Event()
        self.calls = 0

    def __call__(self, body):
        self.calls += 1
        if self.calls == 1:
            self.arrived.set()
            assert self.release.wait(30), "the test never let the model answer"
            return self.first
        return self.then


@pytest.fixture
def wipe_calendar():
    """An owner-only tool that records every run."""
    runs: list[int | None] = []
    tool = registry.register(Tool("wipe_calendar", "Delete every event.", {"type": "object", "properties": {}},
                                  lambda ctx, args: runs.append(ctx.user.pk if ctx.user else None) or "done",
                                  Trust.OWNER))
    yield runs
    registry.tools.pop(tool.name)


def ask_while(world, model_server, drain, change, first=None) -> Message:
    """Alice (owner) asks on the page; `change` runs while the model decides to call the tool
    (or, given `first`, while it writes that answer)."""
    held = HeldModel(first or tool_call("wipe_calendar", {}), reply("Your calendar is empty now."))
    model_server.default = held
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    question = inbound_accept(session=chat, content="wipe my calendar", channel="web", sender_name="Alice",
                              trust=Trust.OWNER).message
    assert held.arrived.wait(30), "the turn never called the model"
    change()
    held.release.set()
    drain()
    question.refresh_from_db()
    return question


def test_a_member_removed_while_the_model_thinks_gets_no_tool_run_and_no_reply(world, model_server, drain,
                                                                               wipe_calendar):
    question = ask_while(world, model_server, drain,
                         lambda: Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete())

    assert wipe_calendar == []
    assert question.answer_state == "failed"
    assert not Message.objects.filter(role="assistant", content="Your calendar is empty now.").exists()


def test_an_owner_made_a_member_while_the_model_thinks_cannot_run_an_owner_only_tool(world, model_server, drain,
                                                                                    wipe_calendar):
    question = ask_while(world, model_server, drain, lambda: Membership.objects.filter(
        tenant=world.tenant_a, user=world.alice).update(role=Membership.Role.MEMBER))

    assert wipe_calendar == []
    result = Message.objects.get(role="tool", metadata__tool="wipe_calendar")
    assert "unavailable" in result.content
    assert question.answer_state == "answered"


def test_a_member_removed_while_the_model_writes_a_plain_answer_gets_no_reply(world, model_server, drain):
    """The check before a round of tools never ran for an answer with none: the reply was
    stored, and sent to someone no longer in the workspace."""
    question = ask_while(world, model_server, drain,
                         lambda: Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete(),
                         first=reply("Your calendar has three events this week."))

    assert question.answer_state == "failed"
    assert "no longer a member" in question.answer_error
    assert list(Message.objects.filter(session=question.session).exclude(pk=question.pk)) == []


def test_a_member_deactivated_while_the_model_writes_a_plain_answer_gets_no_reply(world, model_server, drain):
    def deactivate():
        world.alice.is_active = False
        world.alice.save(update_fields=["is_active"])

    question = ask_while(world, model_server, drain, deactivate,
                         first=reply("Your calendar has three events this week."))

    assert question.answer_state == "failed"
    assert list(Message.objects.filter(session=question.session).exclude(pk=question.pk)) == []


def test_an_owner_made_a_member_while_the_model_writes_a_plain_answer_still_gets_it(world, model_server, drain):
    question = ask_while(world, model_server, drain, lambda: Membership.objects.filter(
        tenant=world.tenant_a, user=world.alice).update(role=Membership.Role.MEMBER),
        first=reply("Your calendar has three events this week."))

    assert question.answer_state == "answered"
    (answer,) = Message.objects.filter(session=question.session, role="assistant")
    assert answer.content == "Your calendar has three events this week."


def test_a_member_removed_while_the_model_thinks_gets_no_failure_notice_either(world, model_server, drain):
    """The model refused the message after its person was removed: the refusal's notice
    was appended to a chat they no longer read (and sent to their surface)."""
    from ..fakes.model_server import error

    question = ask_while(world, model_server, drain,
                         lambda: Membership.objects.filter(tenant=world.tenant_a, user=world.alice).delete(),
                         first=error(400, "bad request"))

    assert question.answer_state == "failed"
    assert "no longer a member" in question.answer_error
    assert list(Message.objects.filter(session=question.session).exclude(pk=question.pk)) == []
