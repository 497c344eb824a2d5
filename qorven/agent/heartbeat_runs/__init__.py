"""One run of a heartbeat: claim the tick, decide whether the model is needed, run the
heartbeat sub-agent in a cron session of its own, record the outcome, deliver the result.

Cost control, cheapest first: a paused beat or a tick already claimed does nothing; a spent
tenant budget or a beat whose inputs have not changed since its last HEARTBEAT_OK is
recorded as skipped without a model call; an answer of HEARTBEAT_OK is recorded and not
delivered. The reserved clear-images beat never calls a model.

Due reminders reach the user once: a run that delivers its answer marks the reminders it
had in view as done; a run that delivers nothing (skipped, failed, HEARTBEAT_OK, no
delivery target) leaves them due for the next one.

- `run`: the run itself, from claiming its tick to its outcome;
- `subagent`: what the beat's model is told, and the conversation with it;
- `outcome`: the run's record, its delivery, and the words for a model's failure;
- `retries`: which failed runs are tried again, when, and the sweeper's recovery;
- `resume`: a try that goes on from the tool rounds the try before stored (no tool twice),
  or finishes from the answer it stored (no second model call, no second delivery).
"""
from __future__ import annotations

from .retries import RUN_TRIES, TRANSIENT, RunFailed, heartbeat_runs_recover, retry_delay
from .run import run_heartbeat
from .subagent import HEARTBEAT_OK

__all__ = [
    "HEARTBEAT_OK",
    "RUN_TRIES",
    "TRANSIENT",
    "RunFailed",
    "heartbeat_runs_recover",
    "retry_delay",
    "run_heartbeat",
]
