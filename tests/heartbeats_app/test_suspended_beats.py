"""Beats of a workspace the host suspends: none runs while it is suspended, and resuming
it does not run what was missed — neither every tick at once nor a retry of a tick from
before — only the ticks after it. The host still sees and exports the beats meanwhile."""
from __future__ import annotations

import io
import json
import re
from datetime import datetime, timedelta, timezone as tz

import pytest
from celery import current_app
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from channels_app.sweep import sweep
from heartbeats_app.models import HeartbeatRun
from heartbeats_app.scheduler import HeartbeatScheduler, _entry_tick
from qorven.agent.heartbeat_runs import run_heartbeat
from sessions_app.models import Message
from tenancy.services import tenant_resume, tenant_suspend

from ..factories.heartbeats_app import beat
from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 5, 4, 8, 0, tzinfo=tz.utc)


def test_resuming_runs_only_the_ticks_after_it_not_those_missed_while_suspended(world, model_server):
    """Celery beat as it runs: the entry looked at again when its last answer said so, and
    each run it sends made (run_heartbeat, as the task does)."""
    model_server.default = reply("All quiet.")
    heartbeat = beat(world.qor_a, cron="*/15 * * * *")
    entry = HeartbeatScheduler.Entry(PeriodicTask.objects.get(pk=heartbeat.periodic_task_id),
                                     app=current_app._get_current_object())
    clock = {"now": START}
    entry.schedule.nowfun = lambda: clock["now"]
    entry.last_run_at = START - timedelta(seconds=1)
    resume_at, end = START + timedelta(hours=2), START + timedelta(hours=2, minutes=40)
    tenant_suspend(tenant=world.tenant_a)
    look_at = START
    while clock["now"] <= end:
        if clock["now"] >= resume_at and world.tenant_a.suspended:
            tenant_resume(tenant=world.tenant_a)
        if clock["now"] >= look_at:
            due, wait = entry.is_due()
            if due:
                tick = datetime.fromisoformat(_entry_tick(entry, clock["now"]))
                run_heartbeat(tenant_id=world.tenant_a.pk, heartbeat_id=heartbeat.pk, tick=tick)
                entry.last_run_at = clock["now"]
            look_at = clock["now"] + timedelta(seconds=max(wait, 1))
        clock["now"] += timedelta(seconds=30)

    ticks = sorted(HeartbeatRun.objects.filter(heartbeat=heartbeat).values_list("tick", flat=True))
    assert ticks == [resume_at, resume_at + timedelta(minutes=15), resume_at + timedelta(minutes=30)]


def test_a_retry_due_while_suspended_is_not_run_after_resume(world, model_server, drain):
    """A run whose model was down just before the suspension: its retry, by the broker or
    the sweeper, comes while the workspace is suspended. That tick is over: resuming
    does not run it hours late (the beat's next tick does the work)."""
    model_server.default = reply("All quiet.")
    heartbeat = beat(world.qor_a)
    before = START - timedelta(days=1)
    HeartbeatRun.objects.create(tenant=world.tenant_a, heartbeat=heartbeat, tick=before, status="failed",
                                reason="unavailable", finished_at=before, error="the model was unavailable")
    tenant_suspend(tenant=world.tenant_a)
    sweep(restart=True)
    drain()
    tenant_resume(tenant=world.tenant_a)
    sweep(restart=True)
    drain()

    assert model_server.requests == []
    (run,) = HeartbeatRun.objects.filter(heartbeat=heartbeat)
    assert (run.status, run.reason) == ("failed", "suspended")


def test_the_reason_a_run_ended_by_the_suspension_is_explained_where_the_host_reads_it(
        world, host, model_server, drain):
    heartbeat = beat(world.qor_a, name="morning-brief")
    before = START - timedelta(days=1)
    HeartbeatRun.objects.create(tenant=world.tenant_a, heartbeat=heartbeat, tick=before, status="failed",
                                reason="unavailable", finished_at=before, error="the model was unavailable")
    tenant_suspend(tenant=world.tenant_a)
    sweep(restart=True)
    drain()

    page = host.get(reverse("admin:heartbeats_app_heartbeat_change", args=[heartbeat.pk]))
    runs = page.context["inline_admin_formsets"][0]
    (reason,) = [field for field in runs.fields() if field["name"] == "reason"]
    failed_for = re.search(r"failed \(([^;)]*)", reason["help_text"]).group(1).split(", ")
    assert "suspended" in failed_for
    assert ">suspended<" in page.content.decode().replace("\n", "")


def test_the_host_sees_a_suspended_workspaces_beats_and_cannot_run_them_meanwhile(world, host, model_server, drain):
    model_server.default = reply("All quiet.")
    heartbeat = beat(world.qor_a, name="morning-brief", owner=world.alice)
    tenant_suspend(tenant=world.tenant_a)

    listing = reverse("admin:heartbeats_app_heartbeat_changelist")
    assert "morning-brief" in host.get(listing).content.decode()
    answer = host.post(listing, {"action": "run_now", "_selected_action": [heartbeat.pk]}, follow=True)
    drain()
    shown = [str(m) for m in answer.context["messages"]]
    assert not HeartbeatRun.objects.exists() and model_server.requests == []
    assert shown == ["Not run, their workspace is suspended: morning-brief."]
    out = io.StringIO()
    call_command("export", "--tenant", "acme", "--user", "alice", stdout=out, stderr=io.StringIO())
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["name"] for line in lines if line["kind"] == "heartbeat"] == ["morning-brief"]

    tenant_resume(tenant=world.tenant_a)  # and alice's /beats lists it again
    alice = Client()
    alice.force_login(world.alice)
    assert alice.post("/chat/api/acme/aria/messages", data=json.dumps({"content": "/beats"}),
                      content_type="application/json").status_code == 201
    drain()
    assert "morning-brief" in Message.objects.filter(role="assistant").order_by("seq").last().content


def test_a_run_under_way_when_the_workspace_is_suspended_asks_the_model_nothing_more(world, model_server):
    """The model's first answer of a beat's run asks for a tool; the host suspends the
    workspace meanwhile. No tool runs, the model is not asked again on the workspace's
    tokens, and nothing is delivered: the run ends, saying why."""
    from django.db import connection

    from tenancy.tool_registry import Tool, registry
    from tenancy.trust import Trust

    from ..fakes.model_server import tool_call

    runs: list[int] = []
    tool = registry.register(Tool("post_note", "Post a note to the family board.", {"type": "object", "properties": {}},
                                  lambda ctx, args: runs.append(1) or "posted", Trust.PUBLIC))

    def suspended_as_it_answers(body):
        if len(model_server.requests) == 1:
            tenant_suspend(tenant=world.tenant_a)
            connection.close()  # this server thread's own
            return tool_call("post_note", {})
        return reply("Posted your note.")

    model_server.default = suspended_as_it_answers
    heartbeat = beat(world.qor_a, deliver_to=world.alice, deliver_channel="web")
    try:
        run = run_heartbeat(tenant_id=world.tenant_a.pk, heartbeat_id=heartbeat.pk, tick=START)
    finally:
        registry.tools.pop(tool.name)

    assert len(model_server.requests) == 1 and runs == []
    assert (run.status, run.reason) == ("failed", "suspended")
    assert not Message.objects.filter(tenant=world.tenant_a, role="assistant").exclude(channel="cron").exists()
