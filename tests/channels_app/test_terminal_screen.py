"""`qorven chat` as a person sees it in a real terminal (tmux): a reply streaming in, what
they type meanwhile, messages from other channels, Ctrl-C and Ctrl-D."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from sessions_app.services import message_append, session_resolve

from ..fakes.model_server import reply
from .screen import Screen
from .test_terminal import ROOT, qorven_env
from .test_terminal_server import server  # noqa: F401 (the fixture: a real `qorven serve`)

pytestmark = pytest.mark.django_db(transaction=True)

QORVEN = str(Path(sys.executable).with_name("qorven"))
CHAT = [QORVEN, "chat", "--tenant", "acme", "--qor", "aria", "--user", "alice"]
WORDS = [f"w{i:02d}" for i in range(80)]  # each once, so any overwritten or repeated piece shows
PROMPT = "you ›"


@pytest.fixture
def screens(tmp_path):
    opened: list[Screen] = []

    def open_screen(env: dict[str, str], *extra: str) -> Screen:
        screen = Screen([*CHAT, *extra], env=env, cwd=ROOT, tmp=tmp_path)
        opened.append(screen)
        screen.wait_for(PROMPT)
        return screen

    yield open_screen
    for screen in opened:
        screen.close()


def last_row(screen: Screen) -> str:
    return [row for row in screen.rows() if row][-1]


def test_a_streamed_reply_reads_as_written_and_what_is_typed_meanwhile_stays_on_the_prompt(world, model_server,
                                                                                          screens):
    model_server.add(reply(" ".join(WORDS[:40]) + "\n\n" + " ".join(WORDS[40:]), chunk_delay=0.08))
    screen = screens(qorven_env(model_server), "--no-server")
    screen.type("tell me the words")
    screen.key("Enter")
    screen.wait_for("w03")
    screen.type("half typed")
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=session, role="user", content="from my phone", channel="telegram", sender_name="Priya",
                   notify=False)
    screen.wait_for("[telegram] Priya: from my phone")
    shown = screen.wait_until(lambda text: re.findall(r"w\d\d", text)[-1:] == ["w79"], "the reply's last word")
    screen.wait_until(lambda text: last_row(screen) == f"{PROMPT} half typed", "the prompt with what was typed")
    shown = screen.text()
    assert re.findall(r"w\d\d", shown) == WORDS, shown  # every word once, in order: nothing written over
    rows = shown.split("\n")
    assert any(re.fullmatch(r"\d\d:\d\d \[telegram\] Priya: from my phone", row.rstrip()) for row in rows), shown
    assert sum(PROMPT in row for row in rows) == 1, shown  # one prompt, at the bottom
    screen.key("C-u", "C-d")
    assert screen.exit_code() == 0
