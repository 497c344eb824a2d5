"""A heartbeat run that is tried again goes on from the tool rounds its earlier tries
stored: a tool that ran (and did something: a memory saved, a message sent) is not run
again, and the model is asked with what it already called and got back."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from heartbeats_app.models import HeartbeatRun
from memory_app.models import Memory
from qorven.agent.heartbeat_runs import RunFailed, run_heartbeat
from qorven.agent.tasks import heartbeat_run
from sessions_app.models import Message, Session

from ..fakes.model_server import Step, error, reply, tool_call

pytestmark = pytest.mark.django_db(transaction=True)
TICK = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.get_fixed_timezone(0))
NOTE = "Alice takes her pills at 8"


def model(*, failures: int, answer: str = "Pills at 8, Alice."):
    """A model as a real one behaves: it saves a note (worded a little differently each
    time it is asked) until it reads that it saved it, then answers; its calls after the
    first `failures` times fail with a 503."""
    left, asked = [failures], [0]

    def step(body) -> Step:
        asked[0] += 1
        if not any(m["role"] == "tool" for m in body["messages"]):
            return tool_call("remember", {"content": f"{NOTE} (noted {asked[0]}).", "type": "fact"})
        if left[0]:
            left[0] -= 1
            return error(503, "overloaded")
        return reply(answer)
    return step


def delivered(world):
    chat = Session.objects.filter(tenant=world.tenant_a, user=world.alice, kind="canonical").first()
    return [m.content for m in Message.objects.filter(session=chat).order_by("seq")] if chat else []


def notes(world):
    return sorted(Memory.objects.filter(tenant=world.tenant_a, content__startswith=NOTE).values_list("content", flat=True))


def test_a_retried_run_goes_on_from_its_stored_tool_rounds_and_runs_no_tool_twice(
    world, pills, model_server, drain, settings
):
    settings.QORVEN_MODEL_RETRIES = 0
    settings.QORVEN_HEARTBEAT_RETRY_DELAY = 0.2
    model_server.default = model(failures=2)
    heartbeat_run.delay(world.tenant_a.pk, pills.pk, tick=TICK.isoformat())
    drain()

    (run,) = HeartbeatRun.objects.all()
    assert (run.status, run.attempts, run.error) == ("ok", 3, "")
    assert notes(world) == [f"{NOTE} (noted 1)."]  # remembered once, by the first try
    assert delivered(world) == ["Pills at 8, Alice."]
    # The last try asked with the round the first one ran: the call and its result.
    last = model_server.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool"]
    assert last[1]["content"] == pills.prompt
    assert last[2]["tool_calls"][0]["function"]["name"] == "remember"
    assert last[3]["tool_call_id"] == last[2]["tool_calls"][0]["id"]
    # One cron session holds the run: its prompt once, the round, the answer.
    cron = Session.objects.get(kind="cron")
    assert (cron.pk, cron.state) == (run.session_id, "archived")
    assert [m.role for m in cron.messages.order_by("seq")] == ["user", "assistant", "tool", "assistant"]


def test_a_run_the_sweeper_takes_again_goes_on_from_its_stored_rounds(world, pills, model_server, drain, settings):
    """A retry lost with its process is queued by the sweeper; it goes on the same way."""
    from channels_app.sweep import sweep

    settings.QORVEN_MODEL_RETRIES = 0
    settings.QORVEN_HEARTBEAT_RETRY_DELAY = 60
    model_server.default = model(failures=1)
    with pytest.raises(RunFailed):
        run_heartbeat(tenant_id=world.tenant_a.pk, heartbeat_id=pills.pk, tick=TICK)
    HeartbeatRun.objects.update(finished_at=timezone.now() - timedelta(seconds=60 + 61))
    assert sweep().heartbeat_runs == 1
    drain()

    (run,) = HeartbeatRun.objects.all()
    assert (run.status, run.attempts) == ("ok", 2)
    assert notes(world) == [f"{NOTE} (noted 1)."]
    assert delivered(world) == ["Pills at 8, Alice."]


def test_a_retry_after_the_prompt_was_edited_finishes_the_run_as_it_was_asked(world, pills, model_server, settings):
    """The tools ran for the prompt the run was asked: the retry goes on with that prompt
    and those rounds; the edited prompt is asked from the next run on (its fingerprint is
    not taken as seen, so a HEARTBEAT_OK does not skip it)."""
    settings.QORVEN_MODEL_RETRIES = 0
    asked = pills.prompt
    model_server.default = model(failures=1, answer="HEARTBEAT_OK")
    with pytest.raises(RunFailed) as raised:
        run_heartbeat(tenant_id=world.tenant_a.pk, heartbeat_id=pills.pk, tick=TICK)
    pills.prompt = "Tell Alice a joke."
    pills.save()

    retried = run_heartbeat(tenant_id=world.tenant_a.pk, heartbeat_id=pills.pk, tick=TICK,
                            run_id=raised.value.run_id)
    assert (retried.status, retried.attempts) == ("noop", 2)
    assert notes(world) == [f"{NOTE} (noted 1)."]
    assert model_server.requests[-1]["messages"][1]["content"] == asked

    model_server.default = None
    model_server.add(reply("Why did the pill cross the road?"))
    nxt = run_heartbeat(tenant_id=world.tenant_a.pk, heartbeat_id=pills.pk, tick=TICK + timedelta(hours=1))
    assert nxt.status == "ok"  # not skipped as unchanged
    assert model_server.requests[-1]["messages"][1]["content"] == "Tell Alice a joke."


def test_a_run_whose_worker_died_mid_round_runs_none_of_that_rounds_calls_again(
    world, pills, model_server, drain
):
    """Its worker stopped after one call of a round ran and before the other's result was
    stored: the run taken over asks with both, the stored result and, for the other, that
    it may or may not have taken effect; neither runs again."""
    from channels_app.sweep import sweep
    from sessions_app.services.append import message_append

    stuck, session, tag, asked = _died_after_asking(world, pills)
    calls = [{"id": "call_1", "type": "function", "function": {"name": "remember", "arguments": '{"content": "x"}'}},
             {"id": "call_2", "type": "function", "function": {"name": "remember", "arguments": '{"content": "y"}'}}]
    rounds = {**tag, "reply_to": asked.seq}
    message_append(session=session, role="assistant", content="", channel="cron", tool_calls=calls, metadata=rounds)
    message_append(session=session, role="tool", content='{"saved": true}', channel="cron", tool_call_id="call_1",
                   metadata={**rounds, "tool": "remember"})
    model_server.add(reply("Pills at 8, Alice."))

    assert sweep(restart=True).heartbeat_runs == 1
    drain()
    stuck.refresh_from_db()
    assert (stuck.status, stuck.attempts, stuck.session_id) == ("ok", 2, session.pk)
    assert not Memory.objects.filter(tenant=world.tenant_a).exists()  # neither call ran (again)
    (request,) = model_server.requests
    first, second = request["messages"][3:]
    assert (first["tool_call_id"], first["content"]) == ("call_1", '{"saved": true}')
    assert second["tool_call_id"] == "call_2" and "may or may not have taken effect" in second["content"]
    assert delivered(world) == ["Pills at 8, Alice."]


def _died_after_asking(world, pills):
    """A run as its worker left it when it died after its prompt was stored: 'running' for
    hours, its cron session holding the prompt. Returns the run, the session, the tag of
    the run's messages and the prompt's message."""
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    stuck = HeartbeatRun.objects.create(tenant=world.tenant_a, heartbeat=pills, tick=TICK,
                                        started_at=timezone.now() - timedelta(hours=3))
    cron = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="cron", user=world.alice,
                           thread_id=f"heartbeat:{pills.pk}:run:{stuck.pk}")
    HeartbeatRun.objects.filter(pk=stuck.pk).update(session=cron)
    tag = {"heartbeat": pills.pk, "run": stuck.pk}
    asked = message_append(session=cron, role="user", content=pills.prompt, channel="cron", metadata=tag).message
    return stuck, cron, tag, asked


def _died_after_answering(world, pills, *, delivering: bool = True):
    """A run as its worker left it when it died after the model answered and before the
    run was recorded: 'running' for hours, its answer stored in its cron session and (when
    `delivering`) appended to Alice's chat for Telegram, as outcome.result_deliver does."""
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    stuck, cron, tag, asked = _died_after_asking(world, pills)
    message_append(session=cron, role="assistant", content="Pills at 8, Alice.", channel="cron",
                   metadata={**tag, "reply_to": asked.seq, "model": "beat-model"})
    if not delivering:
        return stuck, None
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    sent = message_append(session=chat, role="assistant", content="Pills at 8, Alice.", channel="telegram",
                          sender_name=world.qor_a.name, external_scope=f"heartbeat:{pills.pk}",
                          external_id=f"run:{stuck.pk}", metadata={**tag, "heartbeat_name": pills.name}).message
    return stuck, sent


def test_a_run_whose_worker_died_after_delivering_is_finished_from_what_it_stored(world, pills, model_server, drain):
    """The run taken over records the answer it delivered: the model is not asked again
    and Alice's chat holds the answer once. Before, the takeover asked the model again
    and recorded that second answer (worded anew) as delivered in place of the one sent."""
    from channels_app.sweep import sweep

    stuck, sent = _died_after_answering(world, pills)
    model_server.default = reply("Pills at 8 o'clock, Alice!")

    assert sweep(restart=True).heartbeat_runs == 1
    drain()
    stuck.refresh_from_db()
    assert (stuck.status, stuck.attempts, stuck.output) == ("ok", 2, "Pills at 8, Alice.")
    assert stuck.delivered_message_id == sent.pk
    assert model_server.requests == []
    assert delivered(world) == ["Pills at 8, Alice."]


def test_a_run_whose_worker_died_before_delivering_its_answer_delivers_the_stored_one(
    world, pills, model_server, drain
):
    from channels_app.sweep import sweep

    stuck, _ = _died_after_answering(world, pills, delivering=False)
    model_server.default = reply("Pills at 8 o'clock, Alice!")

    assert sweep(restart=True).heartbeat_runs == 1
    drain()
    stuck.refresh_from_db()
    assert (stuck.status, stuck.output) == ("ok", "Pills at 8, Alice.")
    assert model_server.requests == []
    assert delivered(world) == ["Pills at 8, Alice."]
    assert stuck.delivered_message.content == "Pills at 8, Alice."
