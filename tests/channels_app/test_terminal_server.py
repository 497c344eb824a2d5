"""`qorven chat` against a real `qorven serve`: what the person sees when they leave it,
or it loses the server, at any moment."""
from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tenancy.models import ApiToken

from ..fakes.model_server import reply
from .test_terminal import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

QORVEN = str(Path(sys.executable).with_name("qorven"))
CHAT = ["chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice"]


# `qorven chat` as a terminal's shell starts it, in the foreground: Ctrl-C's signal is not
# ignored. A test run started in the background (`make test &`) ignores it, and a program
# keeps an ignored signal ignored across exec: the Ctrl-C cases then waited out their 30 s.
CTRL_C_HEEDED = [sys.executable, "-c",
                 "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"]


class Chat:
    """A running `qorven chat --json`, its output lines as they come."""

    def __init__(self, env: dict[str, str], *options: str) -> None:
        self.proc = subprocess.Popen([*CTRL_C_HEEDED, QORVEN, *CHAT, *options], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def send(self, content: str) -> None:
        self.proc.stdin.write(json.dumps({"content": content}) + "\n")
        self.proc.stdin.flush()

    def until(self, kind: str) -> dict:
        while True:
            line = self.lines.get(timeout=60)
            if line["type"] == kind:
                return line


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["ctrl-c", "sigterm", "terminal-closed"])
def test_leaving_while_a_reply_streams_is_quiet_and_revokes_the_terminals_token(server, model_server, stop):
    model_server.add(reply("a long answer " * 40, chunk_delay=0.05))
    chat = Chat(server)
    chat.send("tell me a long story")
    chat.until("chunk")
    chat.proc.send_signal(stop)
    chat.proc.wait(30)
    stderr = chat.proc.stderr.read()
    assert chat.proc.returncode == 128 + stop
    assert "Traceback" not in stderr
    token = ApiToken.objects.get(name="qorven chat")
    assert token.revoked_at is not None  # not left working for half an hour


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tgkill and /proc are Linux's")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["ctrl-c", "sigterm", "terminal-closed"])
def test_leaving_while_a_reply_streams_when_the_signal_lands_on_another_thread(server, model_server, stop):
    """The kernel hands a signal sent to the process to any of its threads; Python runs the
    handler on the main thread, which, waiting for a line of input, was not woken: the
    terminal stayed until its input ended (once in CI, on a loaded machine)."""
    model_server.add(reply("a long answer " * 40, chunk_delay=0.05))
    chat = Chat(server)
    chat.send("tell me a long story")
    chat.until("chunk")
    signal_another_thread(chat.proc.pid, stop)
    try:
        chat.proc.wait(30)
    finally:
        chat.proc.kill()  # not left waiting for its input
    assert chat.proc.returncode == 128 + stop
    assert "Traceback" not in chat.proc.stderr.read()
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tgkill and /proc are Linux's")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "terminal-closed"])
def test_a_terminal_reading_a_pipe_leaves_when_the_signal_lands_on_another_thread(server, model_server, stop):
    """The terminal for a person, reading a pipe, waited for its next line as --json did."""
    proc = subprocess.Popen([QORVEN, *[arg for arg in CHAT if arg != "--json"]], cwd=ROOT, env=server,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    model_server.add(reply("a long answer " * 40, chunk_delay=0.05))
    streaming = threading.Event()

    def read() -> None:
        shown = b""
        while chunk := proc.stdout.read1(4096):
            shown += chunk
            if b"a long answer" in shown:
                streaming.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        proc.stdin.write(b"tell me a long story\n")
        proc.stdin.flush()
        assert streaming.wait(60)
        signal_another_thread(proc.pid, stop)
        proc.wait(30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + stop
    assert b"Traceback" not in proc.stderr.read()
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


def signal_another_thread(pid: int, signum: int) -> None:
    """`signum` to one of process `pid`'s threads other than its main one, as the kernel
    may deliver a signal sent to the process (to any thread that does not block it)."""
    tid = min(int(task) for task in os.listdir(f"/proc/{pid}/task") if int(task) != pid)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.tgkill(pid, tid, signum) == 0, os.strerror(ctypes.get_errno())


def test_chat_help_names_every_kind_of_line_json_mode_writes():
    from channels_app.management.commands.chat import Command

    text = " ".join(Command().create_parser("qorven", "chat").format_help().split())
    for kind in ("message", "notice", "chunk", "restart", "done", "error", "session"):
        assert f'"{kind}"' in text, kind
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert '`{"type": "session", "session_id"}`' in readme


def test_chat_help_and_the_readme_say_a_lost_access_ends_either_mode_with_exit_3():
    from channels_app.management.commands.chat import Command

    text = " ".join(Command().create_parser("qorven", "chat").format_help().split())
    assert "ends it at once with exit code 3, in either mode" in text
    readme = " ".join((ROOT / "README.md").read_text().split())
    person = readme[readme.index("### The terminal"):readme.index("`qorven chat --json …` is for scripts")]
    assert '"You no longer have access to this workspace." and exits 3 at once' in person


def test_removed_from_the_workspace_before_sending_json_mode_says_so_and_exits_3(world, model_server, server):
    model_server.add(reply("Hello."))
    chat = Chat(server)
    chat.send("hi")
    chat.until("done")
    world.alice.memberships.all().delete()
    chat.send("still there?")
    error = chat.until("error")
    chat.proc.wait(60)
    stderr = chat.proc.stderr.read()
    assert chat.proc.returncode == 3, stderr
    assert error == {"type": "error", "error": "you no longer have access to this workspace", "code": "access_lost"}
    assert "no longer has access" in stderr and "gave up waiting" not in stderr


def test_removed_from_the_workspace_while_waiting_for_a_reply_json_mode_says_so_and_exits_3(world, model_server,
                                                                                          server):
    # The reply hangs until the terminal has noticed, then comes: the server, stopping after
    # the test, waits for its turn to finish (it waited out a fixed 20 s).
    noticed = threading.Event()
    model_server.add(reply("Too late.", hold=noticed))
    chat = Chat(server, "--wait", "600")
    try:
        chat.send("hi")
        chat.proc.stdin.close()  # the end of input: it waits for the reply
        deadline = time.monotonic() + 60
        while not model_server.requests:  # the turn has begun
            assert time.monotonic() < deadline
            time.sleep(0.1)
        world.alice.memberships.all().delete()
        error = chat.until("error")
        chat.proc.wait(60)
    finally:
        noticed.set()
    assert chat.proc.returncode == 3
    assert error["code"] == "access_lost"
    assert "gave up waiting" not in chat.proc.stderr.read()


def test_a_reply_taken_back_mid_stream_streams_again_from_the_answer_through_the_server(world, model_server, server):
    """Through a server the terminal is sent what the chat page is: the reply starting
    afresh (an empty text so far). It took that for more of the text, so the answer's
    first characters, as many as the reasoning had, were lost."""
    from dataclasses import replace

    from .test_model_thinking import BARE

    model_server.add(replace(BARE, chunk_delay=0.1))
    chat = Chat(server)
    chat.send("hi")
    lines = []
    while not lines or lines[-1]["type"] != "done":
        lines.append(chat.lines.get(timeout=60))
    chat.proc.stdin.close()
    chat.proc.wait(60)
    kinds = [line["type"] for line in lines]
    # What the terminal shows: the text streamed since the reply last started afresh. A
    # terminal whose socket caught up only after the reasoning was taken back (a loaded
    # machine) is sent the answer so far and no restart; either way none of it is lost.
    last_restart = len(kinds) - 1 - kinds[::-1].index("restart") if "restart" in kinds else 0
    shown = "".join(line["delta"] for line in lines[last_restart:] if line["type"] == "chunk")
    assert shown == "Hello Priya!"


@pytest.mark.parametrize("leave", ["/quit", " /exit "])
def test_json_mode_leaves_on_quit_and_sends_nothing(world, model_server, server, leave):
    """`{"content": "/quit"}` was posted to the server as a message and answered by the
    model, and the program went on reading: the terminal's way out was a chat line in
    --json. It now leaves there (exit 0), the lines after it unread, nothing stored."""
    from sessions_app.models import Message

    model_server.add(reply("Goodbye, then."))
    chat = Chat(server)
    chat.send(leave)
    chat.send("and this one after it")
    chat.proc.stdin.close()  # before, it went on to this line, then waited for both replies
    chat.proc.wait(60)
    stderr = chat.proc.stderr.read()
    assert chat.proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert Message.objects.count() == 0
    assert model_server.requests == []
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


def test_chat_help_and_the_readme_say_quit_leaves_json_mode():
    from channels_app.management.commands.chat import Command

    text = " ".join(Command().create_parser("qorven", "chat").format_help().split())
    assert 'a line {"content": "/quit"} (or "/exit") leaves at once with exit code 0, sending nothing' in text
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert 'A line `{"content": "/quit"}` (or `"/exit"`) leaves at once' in readme
