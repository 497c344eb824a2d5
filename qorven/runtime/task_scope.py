"""What an upper layer wraps around a lower layer's tasks, without the task knowing.

A task below the edges (a turn, a heartbeat's run) runs its work inside `task_scope()`;
the apps above register what the scope holds (`task_scope_register`, from their
AppConfig.ready). channels_app registers the sending of the replies a task wrote, made by
that task as its work ends instead of by a send task each (channels_app.tasks
.sends_at_the_end): the agent writes replies and knows nothing of platforms.

A task whose work comes in parts (a turn answering one message of a session after
another) calls `task_checkpoint()` between them, so what a scope holds of the parts done
(their replies) is handed on then, not after the parts still to come.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_scopes: list[Callable[[], AbstractContextManager[Any]]] = []
_checkpoints: ContextVar[tuple[Callable[[], None], ...]] = ContextVar("qorven_task_checkpoints", default=())


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
def task_checkpoint_on(handler: Callable[[], None]) -> Iterator[None]:
    """Inside the block, `task_checkpoint()` calls `handler` (after those of the blocks
    around it). `handler` must not raise: the task's own work goes on after it."""
    token = _checkpoints.set((*_checkpoints.get(), handler))
    try:
        yield
    finally:
        _checkpoints.reset(token)


def task_checkpoint() -> None:
    """The work so far is done and can be handed on before the rest is done."""
    for handler in _checkpoints.get():
        handler()


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
