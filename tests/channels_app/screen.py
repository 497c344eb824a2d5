"""A program running in a real terminal (tmux, on a server of the test's own), read as the
person sees it: the screen's text after the terminal has applied every escape, cursor
move and redraw. Waits are for text to appear, with a generous deadline, never timings."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

WIDTH, HEIGHT = 100, 40


class Screen:
    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: Path, tmp: Path, width: int = WIDTH,
                 height: int = HEIGHT) -> None:
        self.socket = f"qorven-test-{uuid.uuid4().hex[:12]}"
        self.exit_file = tmp / f"{self.socket}.exit"
        script = tmp / f"{self.socket}.sh"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        # The exit code is written where the test reads it; the pane stays for capture-pane.
        # A Ctrl-C between prompts reaches the shell too (SIGINT to the terminal's foreground
        # group): it stays, as a person's shell does (a trap is not inherited by the program).
        script.write_text(f"trap : INT\n{exports}cd {shlex.quote(str(cwd))}\n{shlex.join(argv)}\n"
                          f"echo $? > {shlex.quote(str(self.exit_file))}\nsleep 600\n")
        self._tmux("new-session", "-d", "-x", str(width), "-y", str(height), f"sh {shlex.quote(str(script))}")

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], capture_output=True,
                              text=True, timeout=30, env={**os.environ, "TERM": "xterm-256color"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    def type(self, text: str) -> None:
        """Keys as typed (literally: no key names)."""
        self._tmux("send-keys", "-l", text)

    def key(self, *names: str) -> None:
        """Named keys: Enter, C-c, C-d…"""
        self._tmux("send-keys", *names)

    def text(self, *, joined: bool = False, escapes: bool = False) -> str:
        """The screen and its scrollback, each row as shown; `joined`: a line the terminal
        wrapped at its edge as the one line it is (a line break the program wrote still
        begins a row); `escapes`: with the colours and attributes the text is shown in."""
        return self._tmux("capture-pane", "-p", "-S", "-200", *(["-J"] if joined else []),
                          *(["-e"] if escapes else []))

    def resize(self, width: int, height: int = HEIGHT) -> None:
        """As a person dragging the terminal's edge: the program is told (SIGWINCH)."""
        self._tmux("resize-window", "-x", str(width), "-y", str(height))

    def close_window(self) -> None:
        """As a person closing the terminal's window: the program is sent SIGHUP, and what
        it writes after goes nowhere."""
        self._tmux("kill-pane")

    def wait_until(self, ok: Callable[[str], bool], what: str, seconds: float = 90) -> str:
        deadline = time.monotonic() + seconds
        while True:
            shown = self.text()
            if ok(shown):
                return shown
            assert time.monotonic() < deadline, f"never on screen: {what}\n--- screen ---\n{shown}"
            time.sleep(0.1)

    def wait_for(self, text: str, seconds: float = 90) -> str:
        return self.wait_until(lambda shown: text in shown, repr(text), seconds)

    def exit_code(self, seconds: float = 60) -> int:
        deadline = time.monotonic() + seconds
        while not self.exit_file.exists() or not self.exit_file.read_text().strip():
            assert time.monotonic() < deadline, f"still running\n--- screen ---\n{self.text()}"
            time.sleep(0.1)
        return int(self.exit_file.read_text())

    def close(self) -> None:
        """The terminal killed (the program is sent SIGHUP), then waited for until it has
        ended: a program still finishing a turn as the test's database is emptied deadlocked
        the emptying (PostgreSQL), and the next test met its rows."""
        pane = subprocess.run(["tmux", "-L", self.socket, "list-panes", "-a", "-F", "#{pane_pid}"],
                              capture_output=True, text=True, timeout=30).stdout.split()
        running = _descendants({int(pid) for pid in pane if pid.isdigit()})
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)
        deadline = time.monotonic() + 30
        while running and time.monotonic() < deadline:
            running = {pid for pid in running if _alive(pid)}
            time.sleep(0.05)
        for pid in running:  # still there after 30 s: as a person's kill -9
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _children_of() -> dict[int, set[int]]:
    children: dict[int, set[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, set()).add(int(entry))
    return children


def _descendants(roots: set[int]) -> set[int]:
    """`roots` and every process below them."""
    children, found, todo = _children_of(), set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, ended and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
