"""`qorven chat` sent two signals back to back, and more while it leaves (a supervisor's
SIGTERM and the closed window's SIGHUP, a `timeout` or a person sending theirs again): it
ends once, cleanly, as at one. The handler of the first did the leaving itself, where a
second could enter it again: a thread's start waiting for ever on a lock the first start
held, or a second SystemExit cutting short the wait for the reply still being written."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessions_app.models import Message
from tenancy.models import ApiToken

from ..fakes.model_server import reply
from .conftest import Silent
from .test_terminal import ROOT, qorven_env
from .test_terminal_server import signal_another_thread

pytestmark = pytest.mark.django_db(transaction=True)

QORVEN = str(Path(sys.executable).with_name("qorven"))
CHAT = ["chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice"]
STORY = "a long answer " * 40


def chat_until_streaming(env: dict[str, str], *options: str) -> subprocess.Popen:
    proc = subprocess.Popen([QORVEN, *CHAT, *options], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps({"content": "tell me a long story"}) + "\n")
    proc.stdin.flush()
    for line in proc.stdout:
        if json.loads(line)["type"] == "chunk":
            return proc
    raise AssertionError(f"no reply streamed: {proc.stderr.read()}")


def signalled(proc: subprocess.Popen, second: int, *, until=lambda: True) -> tuple[int, str]:
    """SIGTERM, then `second` at once, and again and again until `until()`. Returns the
    exit status a shell sees (128 + the signal for a process a signal ended: the last
    ones may come once the interpreter, at its very end, has put their default back) and
    what the process wrote on stderr."""
    deadline = time.monotonic() + 60
    try:
        os.kill(proc.pid, signal.SIGTERM)
        os.kill(proc.pid, second)
        while proc.poll() is None and not until() and time.monotonic() < deadline:
            os.kill(proc.pid, second)
            time.sleep(0.05)
        proc.wait(30)
    finally:
        proc.kill()
    proc.stdout.read()
    return (128 - proc.returncode if proc.returncode < 0 else proc.returncode), proc.stderr.read()


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm-twice", "then-sighup"])
def test_two_signals_while_the_chat_itself_writes_a_reply_end_it_once_with_the_reply_stored(world, model_server,
                                                                                          second):
    """No server: the reply being written is stored before the process ends (README), and
    the signals that come while it waits for it change nothing of that: the second
    SystemExit, raised in the interpreter's wait for the reply's thread, ended the wait
    ("Exception ignored in: <module 'threading'>") and the reply was never stored."""
    model_server.add(reply(STORY, chunk_delay=0.05))
    proc = chat_until_streaming(qorven_env(model_server), "--no-server")
    code, stderr = signalled(proc, second, until=Message.objects.filter(role="assistant", channel="tui").exists)
    # Pending together, the lower-numbered signal is delivered first: either may be the one.
    assert code in (128 + signal.SIGTERM, 128 + second), stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    (answer,) = Message.objects.filter(role="assistant", channel="tui")
    assert answer.content == STORY


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm-twice", "then-sighup"])
def test_two_signals_while_a_server_writes_the_reply_end_the_terminal_once_signed_out(server, model_server, second):
    """Through a server the handler started the sign-out's thread: a second signal come
    during that start could leave the terminal waiting for ever on the lock it held."""
    model_server.add(reply(STORY, chunk_delay=0.05))
    proc = chat_until_streaming(server)
    code, stderr = signalled(proc, second)
    assert code in (128 + signal.SIGTERM, 128 + second), stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


@pytest.mark.parametrize("to", ["process", "another-thread"])
@pytest.mark.parametrize("mode", [["--json"], []], ids=["json", "pipe"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_a_signal_while_a_message_waits_for_a_server_that_does_not_answer_leaves_at_once(world, model_server,
                                                                                      silent_server, mode, signum,
                                                                                      to):
    """The handler only notes the signal, and the terminal left at its next safe point,
    past the send: once the server's answer had not come within the send's 30 s, the
    message said not to have been sent the while. Also when the kernel hands the signal
    to a thread other than the main one."""
    command = [QORVEN, "chat", *mode, "--tenant", "acme", "--qor", "aria", "--user", "alice",
               "--server", silent_server]
    proc = subprocess.Popen(command, cwd=ROOT, env=qorven_env(model_server), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write((json.dumps({"content": "hello"}) if mode else "hello") + "\n")
        proc.stdin.flush()
        assert Silent.came.wait(60), proc.stderr.read() if proc.poll() is not None else "no message sent"
        if to == "process":
            proc.send_signal(signum)
        else:
            signal_another_thread(proc.pid, signum)
        proc.wait(120)
    finally:
        proc.kill()
    shown, stderr = proc.stdout.read(), proc.stderr.read()
    assert proc.returncode == -signum or proc.returncode == 128 + signum, stderr
    assert "did not answer" not in shown and "Traceback" not in stderr, (shown, stderr)
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None
