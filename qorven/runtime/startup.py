"""What an app does when a Qorven process starts: sync a file into the database, start a
piece of in-process machinery; and what it does when the process stops: stop that
machinery. Apps register in their `AppConfig.ready()`; `qorven serve` and `qorven worker`
run what is registered for them, so the runtime never imports an app.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass(frozen=True)
class Startup:
    """The process that is starting: `process` is "serve" or "worker"; `embedded` is true
    when tasks run inside this process (no broker); `options` are the command's own."""

    process: str
    stdout: TextIO
    stderr: TextIO
    embedded: bool
    options: Mapping[str, Any] = field(default_factory=dict)


Hook = Callable[[Startup], None]
_hooks: list[tuple[frozenset[str], bool, Hook]] = []
_shutdown_hooks: list[tuple[frozenset[str], Hook]] = []


def on_startup(*processes: str, after_worker: bool = False) -> Callable[[Hook], Hook]:
    """Register `hook` for these processes: before the embedded worker starts (syncs), or
    once it runs (`after_worker`, for what queues tasks as soon as it starts)."""

    def wrap(hook: Hook) -> Hook:
        _hooks.append((frozenset(processes), after_worker, hook))
        return hook

    return wrap


def startup_run(startup: Startup, *, after_worker: bool) -> None:
    """Run the hooks registered for this process and phase, in registration order (the
    order of INSTALLED_APPS)."""
    for processes, phase, hook in _hooks:
        if startup.process in processes and phase == after_worker:
            hook(startup)


def on_shutdown(*processes: str) -> Callable[[Hook], Hook]:
    """Register `hook` to run when these processes stop (SIGTERM, Ctrl-C), before the
    running tasks are waited for: for what would otherwise go on queueing new ones."""

    def wrap(hook: Hook) -> Hook:
        _shutdown_hooks.append((frozenset(processes), hook))
        return hook

    return wrap


def shutdown_run(startup: Startup) -> None:
    """Run the shutdown hooks registered for this process, latest registered first (what
    started last stops first)."""
    for processes, hook in reversed(_shutdown_hooks):
        if startup.process in processes:
            hook(startup)
