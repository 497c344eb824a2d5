from __future__ import annotations
import time, statistics, cProfile, pstats, io
import pytest
from django.db import connection
from qorven.agent.turns import turn_process
from sessions_app.services import message_append, session_resolve
from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)

def test_probe(world, model_server):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    times = []
    log = []
    def wrap(execute, sql, params, many, context):
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            log.append((time.perf_counter() - t, sql[:110]))
    prof = cProfile.Profile()
    for i in range(60):
        message_append(session=session, role="user", content=f"what is up {i}?", channel="web", sender_name="Alice",
                       awaits_answer=True, notify=False, metadata={"trust": "owner"})
        model_server.add(reply("Not much."))
        log.clear()
        if i >= 20: prof.enable()
        t = time.perf_counter()
        with connection.execute_wrapper(wrap):
            turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk)
        times.append(time.perf_counter() - t)
        if i >= 20: prof.disable()
    print("\nturn p50 ms", statistics.median(times[20:]) * 1000, "queries", len(log), "db ms", sum(x for x, _ in log) * 1000)
    for d, s in log:
        print(f"{d*1000:6.2f} {s}")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(45)
    print(out.getvalue())
