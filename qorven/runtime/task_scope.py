"""What an upper layer wraps around a lower layer's tasks, without the task knowing.

A task below the edges (a turn, a heartbeat's run) runs its work inside `task_scope()`;
the apps above register what the scope holds (`task_scope_register`, from their
AppConfig.ready). channels_app registers the sending of the replies a task wrote, made by
that task as its work ends instead of by a send task each (channels_app.tasks
.sends_at_the_end): the agent writes replies and knows nothing of platforms.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_scopes: list[Callable[[], AbstractContextManager[Any]]] = []


def task_scope_register(scope: Callable[[], AbstractContextManager[Any]]) -> None:
    """Enter `scope()` around the work of every task that runs in a task scope (once,
    however often it is registered)."""
    if scope not in _scopes:
        _scopes.append(scope)


@contextmanager
def task_scope() -> Iterator[None]:
    """The registered scopes, entered in the order registered and left in reverse."""
    with ExitStack() as stack:
        for scope in list(_scopes):
            stack.enter_context(scope())
        yield


@contextmanager
def collecting(var: ContextVar[list[T] | None]) -> Iterator[list[T]]:
    """Set `var` to a fresh list for the block and yield it: code in the block that finds
    a list there hands its work to it (to the block's owner) instead of queuing a task
    (qorven.agent.gateway.turns_here, channels_app.delivery.deliveries_here)."""
    collected: list[T] = []
    token = var.set(collected)
    try:
        yield collected
    finally:
        var.reset(token)
