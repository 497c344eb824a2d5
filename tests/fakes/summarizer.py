"""A scripted summarizer for the model server: answers the memory flush and the summary
calls the way a good model would, and everything else with a plain reply.

Use as `model_server.default = FakeModel()`. It recognises the summarizer's two calls by
their instructions and reads the transcript lines (`[2026-01-02 10:00 telegram] Alice:
text`): a user line starting with "remember" becomes a fact, one starting with "remind me"
a reminder, one starting with "from now on" a lesson (only "remember" from a line marked lower trust). It counts its calls, so tests can assert what happened.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from memory_app.summarizer.model_answers import FLUSH_INSTRUCTIONS, SUMMARY_INSTRUCTIONS

from .model_server import Step, reply

_LINE = re.compile(r"^\[(?P<when>\S+ \S+) (?P<channel>\w+)(?P<lower> · lower trust)?\] (?P<who>[^:]+): (?P<text>.*)$")
FLUSH_MARK = FLUSH_INSTRUCTIONS.split("\n", 1)[0][:40]
SUMMARY_MARK = SUMMARY_INSTRUCTIONS.split("\n", 1)[0][:40]


def kind_of(body: dict[str, Any]) -> str:
    """'flush', 'summary' or 'main': which call a recorded request was."""
    system = str((body.get("messages") or [{}])[0].get("content") or "")
    if system.startswith(FLUSH_MARK):
        return "flush"
    if system.startswith(SUMMARY_MARK):
        return "summary"
    return "main"


@dataclass
class FakeModel:
    main: list[Step] = field(default_factory=list)  # scripted main replies, then "ok N"
    # Raw flush answers to give first (None: the usual answer, for that call).
    flush_override: list[str | None] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=lambda: {"flush": 0, "summary": 0, "main": 0})

    def __call__(self, body: dict[str, Any]) -> Step:
        kind = kind_of(body)
        self.calls[kind] += 1
        if kind == "flush":
            raw = self.flush_override.pop(0) if self.flush_override else None
            if raw is not None:
                return reply(raw)
            return reply(json.dumps(self._flush(body)))
        if kind == "summary":
            return reply("```json\n" + json.dumps(self._summary(body)) + "\n```")
        if self.main:
            return self.main.pop(0)
        return reply(f"ok {self.calls['main']}")

    def _lines(self, body: dict[str, Any]) -> list[dict[str, str]]:
        text = str(body["messages"][1]["content"])
        transcript = text.split("Conversation excerpt (oldest first):\n", 1)[-1]
        return [m.groupdict() for m in map(_LINE.match, transcript.splitlines()) if m]

    def _flush(self, body: dict[str, Any]) -> dict[str, list[str]]:
        facts, reminders, lessons = [], [], []
        for line in self._lines(body):
            text = line["text"].strip()
            if text.lower().startswith("remember "):
                facts.append(f"{line['who']} said: {text[len('remember '):]}")
            elif line["lower"]:
                continue  # as it is told: from a surface of less trust, never the user's own wish
            elif text.lower().startswith("remind me "):
                reminders.append(f"{line['who']} asked: {text}")
            elif text.lower().startswith("from now on "):
                lessons.append(f"{line['who']} taught: {text}")
        answer = {"facts": facts, "reminders": reminders, "open_tasks": []}
        return {**answer, "lessons": lessons} if lessons else answer  # a model may leave the key out

    def _summary(self, body: dict[str, Any]) -> dict[str, str]:
        lines = self._lines(body)
        previous = str(body["messages"][1]["content"]).split("Previous summary:\n", 1)[-1].split("\n\n", 1)[0]
        channels = sorted({line["channel"] for line in lines})
        digest = f"SUMMARY of {len(lines)} messages on {', '.join(channels)}."
        note = digest if previous == "(none)" else f"{previous} {digest}"
        return {"digest": digest, "note": note}
