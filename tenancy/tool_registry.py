"""The tool registry. Each tool declares its name, JSON schema, minimum trust and handler;
apps register their own tools in their `tools.py` (a tool lives in the app whose data it
touches), discovered at startup (see tenancy.apps); the agent only reads the registry."""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User

from .models import Qor, Tenant
from .switches import tools_enabled
from .trust import Trust, trust_allows

logger = logging.getLogger(__name__)


class ToolError(Exception):
    """A tool's way to tell the model what went wrong (bad arguments, not allowed, …)."""


@dataclass(frozen=True)
class ToolContext:
    tenant: Tenant
    qor: Qor
    user: User | None
    session_id: int
    channel: str
    trust: str


Handler = Callable[[ToolContext, dict[str, Any]], Any]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    min_trust: str = Trust.PAIRED

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class ToolRegistry:
    tools: dict[str, Tool] = field(default_factory=dict)

    def register(self, tool: Tool) -> Tool:
        self.tools[tool.name] = tool
        return tool

    def offered(self, *, tenant: Tenant, qor: Qor, trust: str) -> list[Tool]:
        """Tools the model may use on this turn: enabled for the tenant, allowed by the
        Qor's allowlist (empty = all), and permitted by the surface's trust."""
        names = [n for n in sorted(self.tools) if not qor.tool_allowlist or n in qor.tool_allowlist]
        names = [n for n in names if trust_allows(trust, self.tools[n].min_trust)]
        if names:
            enabled = tools_enabled(tenant, names)
            names = [n for n in names if n in enabled]
        return [self.tools[n] for n in names]

    def execute(self, ctx: ToolContext, offered: list[Tool], name: str, raw_arguments: str) -> str:
        """Run one tool call and return the text the model sees. Never raises: an unknown
        tool, bad JSON or a failing handler becomes an error result for the model."""
        tool = next((t for t in offered if t.name == name), None)
        if tool is None:
            return _error(f"unknown or unavailable tool {name!r}; available: {', '.join(t.name for t in offered) or 'none'}")
        try:
            arguments = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as exc:
            return _error(f"arguments are not valid JSON ({exc.msg}); send a JSON object matching the schema")
        if not isinstance(arguments, dict):
            return _error("arguments must be a JSON object")
        missing = [k for k in tool.parameters.get("required", []) if k not in arguments]
        if missing:
            return _error(f"missing required argument(s): {', '.join(missing)}")
        try:
            result = tool.handler(ctx, arguments)
        except ToolError as exc:
            return _error(str(exc))
        except Exception:
            # Its text can name an internal host or a row: the log's, not the model's to repeat.
            logger.exception("tool %s failed", name)
            return _error("the tool failed on our side (the error is in the server's log); "
                          "tell the person it could not be done now")
        return result if isinstance(result, str) else json.dumps(result, default=str, ensure_ascii=False)


def _error(message: str) -> str:
    return json.dumps({"error": message})


registry = ToolRegistry()


def tool(*, name: str, description: str, parameters: dict[str, Any], min_trust: str = Trust.PAIRED):
    """Decorator: register the function as a tool handler."""

    def wrap(handler: Handler) -> Handler:
        registry.register(Tool(name, description, parameters, handler, min_trust))
        return handler

    return wrap
