"""`qorven chat` as a person sees it in a real terminal (tmux): a reply streaming in, what
they type meanwhile, messages from other channels, Ctrl-C and Ctrl-D."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.db import transaction
from django.db.models import F

from channels_app.terminal_rows import CONTINUED
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.models import ApiToken

from ..fakes.model_server import reply
from .conftest import Silent
from .screen import Screen
from .test_terminal import ROOT, qorven_env
from .test_terminal_server import signal_another_thread

pytestmark = pytest.mark.django_db(transaction=True)

QORVEN = str(Path(sys.executable).with_name("qorven"))
CHAT = [QORVEN, "chat", "--tenant", "acme", "--qor", "aria", "--user", "alice"]
WORDS = [f"w{i:02d}" for i in range(80)]  # each once, so any overwritten or repeated piece shows
PROMPT = "you ›"


@pytest.fixture
def screens(tmp_path):
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is missing: .ci/run installs it with apt")
        pytest.skip("tmux is not installed (apt-get install -y tmux)")
    opened: list[Screen] = []

    def open_screen(env: dict[str, str], *extra: str, **size: int) -> Screen:
        screen = Screen([*CHAT, *extra], env=env, cwd=ROOT, tmp=tmp_path, **size)
        opened.append(screen)
        screen.wait_for(PROMPT)
        return screen

    yield open_screen
    for screen in opened:
        screen.close()


def last_row(shown: str) -> str:
    """The screen's last row with text, in one capture of it: a capture taken while the
    prompt redraws itself can end above the prompt, so what a test asserts is read from the
    capture its wait was satisfied by."""
    return [row.rstrip() for row in shown.split("\n") if row.strip()][-1]


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
    shown = screen.wait_until(lambda text: re.findall(r"w\d\d", text)[-1:] == ["w79"]
                              and last_row(text) == f"{PROMPT} half typed", "the reply's last word, then the prompt")
    assert re.findall(r"w\d\d", shown) == WORDS, shown  # every word once, in order: nothing written over
    rows = shown.split("\n")
    assert any(re.fullmatch(r"\d\d:\d\d \[telegram\] Priya: from my phone", row.rstrip()) for row in rows), shown
    assert sum(PROMPT in row for row in rows) == 1, shown  # one prompt, at the bottom
    screen.key("C-u", "C-d")
    assert screen.exit_code() == 0


@pytest.mark.parametrize("through", ["server", "database"])
def test_ctrl_c_while_a_reply_streams_stops_that_reply_and_keeps_the_terminal(world, model_server, request, screens,
                                                                            through):
    model_server.add(reply("a long answer " * 60, chunk_delay=0.1), reply("Fine."))
    if through == "server":
        screen = screens(request.getfixturevalue("server"))
    else:  # the turn runs in the terminal's own process
        screen = screens(qorven_env(model_server), "--no-server")
    screen.type("tell me a long story")
    screen.key("Enter")
    screen.wait_for("a long answer")
    screen.type("draft")
    screen.key("C-c")
    screen.wait_for("(stopped)")
    stored = Message.objects.get(role="assistant")
    assert stored.metadata.get("stopped") and len(stored.content) < len(("a long answer " * 60).strip())
    screen.wait_until(lambda text: last_row(text) == f"{PROMPT} draft", "the prompt with what was typed")
    screen.type(" more")
    screen.key("Enter")
    screen.wait_for("Fine.")  # still chatting
    assert not screen.exit_file.exists()
    screen.key("C-d")
    assert screen.exit_code() == 0
    if through == "server":
        assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


def test_ctrl_c_while_a_message_is_being_sent_stops_its_reply_and_keeps_the_terminal(world, model_server, screens):
    """Between the prompts (Enter pressed, the message on its way) Ctrl-C left the terminal."""
    model_server.add(reply("a long answer " * 60, chunk_delay=0.1))
    screen = screens(qorven_env(model_server), "--no-server")
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="tui", user=world.alice)
    with transaction.atomic():  # the session's row held: the message waits on its way
        Session.objects.filter(pk=session.pk).update(last_seq=F("last_seq"))
        screen.type("tell me a long story")
        screen.key("Enter")
        screen.wait_until(lambda text: PROMPT not in text, "no prompt: the message on its way")
        screen.key("C-c")
    screen.wait_until(lambda text: "(stopped)" in text or screen.exit_file.exists(), "the reply stopped")
    assert not screen.exit_file.exists()
    screen.wait_until(lambda text: last_row(text) == PROMPT, "the prompt")
    screen.key("C-d")
    assert screen.exit_code() == 0


@pytest.mark.parametrize("keys", [["C-c"], ["C-d"], ["x", "C-c", "C-c"]],
                         ids=["ctrl-c-at-the-empty-prompt", "ctrl-d", "ctrl-c-twice"])
def test_leaving_from_the_prompt_revokes_the_terminals_token(world, model_server, server, screens, keys):
    screen = screens(server)
    screen.key(*keys)
    assert screen.exit_code() == 0
    assert "Traceback" not in screen.text()
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


def test_ctrl_c_twice_while_a_reply_streams_leaves(world, model_server, server, screens):
    model_server.add(reply("a long answer " * 60, chunk_delay=0.1))
    screen = screens(server)
    screen.type("tell me a long story")
    screen.key("Enter")
    screen.wait_for("a long answer")
    screen.key("C-c", "C-c")
    assert screen.exit_code() == 0
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


def test_keys_typed_while_a_reply_streams_line_by_line_reach_the_prompt(world, model_server, screens):
    """Each line of a reply is written above the prompt. prompt_toolkit's way of writing
    there (in_terminal) put the terminal back in its cooked mode meanwhile, for a program
    run in it: a key typed then was the terminal's own, which echoed letters where the
    cursor was and took Ctrl-D for the end of a line (the chat stayed open). Typed while
    many short lines stream, every letter reaches the line typed, and Ctrl-D leaves."""
    lines = "".join(f"line {n}\n" for n in range(600))
    model_server.add(reply(lines, chunk_size=7, chunk_delay=0.004))
    model_server.add(reply(lines, chunk_size=7, chunk_delay=0.004))
    screen = screens(qorven_env(model_server), "--no-server")
    screen.type("go")
    screen.key("Enter")
    screen.wait_for("line 20")
    typed = "the quick brown fox jumps over the lazy dog"
    for letter in typed:
        screen.type(letter)
        time.sleep(0.01)
    shown = screen.wait_until(lambda text: "line 599" in text and last_row(text) == f"{PROMPT} {typed}", "the line typed")
    assert typed not in shown.replace(f"{PROMPT} {typed}", ""), shown  # nowhere but on the prompt
    screen.key("C-u", "Enter")  # nothing sent
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="tui", user=world.alice)
    model_server.requests.clear()
    screen.type("again")
    screen.key("Enter")
    screen.wait_for("line 30")
    screen.key("C-d")
    assert screen.exit_code(seconds=30) == 0
    assert Message.objects.filter(session=session, role="user").count() == 2


@pytest.mark.parametrize("through, lost", [("server", "removed"), ("server", "token revoked"),
                                           ("database", "removed")])
def test_losing_access_while_the_terminal_is_open_says_so_and_exits_3(world, model_server, request, screens,
                                                                      through, lost):
    """As `qorven chat --json` does: a script wrapping the interactive terminal tells a lost
    access (exit 3) from a person who left (exit 0), and nobody sits at a prompt whose every
    message would be refused."""
    from django.utils import timezone

    if through == "server":
        screen = screens(request.getfixturevalue("server"))
    else:
        screen = screens(qorven_env(model_server), "--no-server")
    if lost == "removed":
        world.alice.memberships.all().delete()
    else:
        token = ApiToken.objects.get(name="qorven chat", revoked_at__isnull=True)
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    screen.wait_for("You no longer have access to this workspace.")
    assert screen.exit_code() == 3
    assert "Traceback" not in screen.text()


def test_reasoning_taken_back_leaves_the_screen_and_the_answer_is_drawn_in_its_place(world, model_server, screens):
    """A model's reasoning with no opening tag streams until its closing tag says it was
    reasoning; the page then clears it. The terminal clears what it drew of it too (a
    message from another channel shown meanwhile stays), and the answer is drawn there."""
    from .test_model_thinking import REASONING, streamed

    thinking = streamed("Thinking it over. ", *[REASONING + " "] * 4, "\nSo: a warm hello.", *[" And more."] * 30,
                        "\n</think>\n\n", "Hello ", "Priya!")
    thinking.chunk_delay = 0.2
    model_server.add(thinking)
    screen = screens(qorven_env(model_server), "--no-server")
    screen.type("hi")
    screen.key("Enter")
    screen.wait_for("a warm hello")
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=session, role="user", content="from my phone", channel="telegram", sender_name="Priya",
                   notify=False)
    assert "Hello Priya!" not in screen.wait_for("from my phone")  # shown amid the reasoning
    shown = screen.wait_until(lambda text: "Hello Priya!" in text and last_row(text) == PROMPT,
                              "the answer, then the prompt")
    assert "Thinking it over" not in shown and "greets" not in shown and "warm hello" not in shown, shown
    rows = shown.split("\n")
    assert sum("from my phone" in row for row in rows) == 1, shown
    assert any(row.rstrip() == "… Hello Priya!" for row in rows), shown
    assert sum(PROMPT in row for row in rows) == 1, shown
    screen.key("C-d")
    assert screen.exit_code() == 0


def test_reasoning_taken_back_that_scrolled_off_the_screen_is_said_to_be_reasoning(world, model_server, screens):
    """What scrolled off the screen cannot be cleared: a line says the text above was the
    model's reasoning, and the answer follows it. Lines come faster than the prompt redraws:
    none is written over, and each is shown in its place."""
    from channels_app.terminal import TAKEN_BACK

    from .test_model_thinking import streamed

    steps = [f"Step {n} of my long reasoning." for n in range(60)]
    thinking = streamed(*[step + "\n" for step in steps], "</think>\n\n", "Hello Priya!")
    thinking.chunk_delay = 0.03
    model_server.add(thinking)
    screen = screens(qorven_env(model_server), "--no-server")
    screen.type("hi")
    screen.key("Enter")
    shown = screen.wait_until(lambda text: "Hello Priya!" in text and last_row(text) == PROMPT,
                              "the answer, then the prompt")
    rows = [row.rstrip() for row in shown.rstrip("\n").split("\n")]
    assert TAKEN_BACK in rows and rows.index(TAKEN_BACK) > max(
        i for i, row in enumerate(rows) if "long reasoning" in row), rows
    # The answer after it: streamed on ("… "), or, when its text came only with the stored
    # reply (the stream ended before its last piece was sent on), as that message.
    answer = rows[rows.index(TAKEN_BACK) + 1]
    assert answer == "… Hello Priya!" or re.fullmatch(r"\d\d:\d\d Aria: Hello Priya!", answer), rows
    # Each a line of the reply: after its "… " or, further on, under its text.
    assert [row[2:] for row in rows if "long reasoning" in row] == steps, rows


LONG = ("This is a rather long message from my phone that certainly does not fit on one row of a narrow "
        "terminal at all")
CODE = "def a_very_long_function_name(argument_one, argument_two, argument_three):"
TABLE = "| col a | col b | col c | col d | col e | col f | col g |"


def terminal_wrapped(screen: Screen) -> list[str]:
    """The lines the terminal itself had to wrap at its edge (the program wrote them wider
    than the screen), as the lines they are. The two captures compared are of one screen:
    taken again while the program redrew a row between them (the prompt is redrawn after
    a reply), as that row would be in one capture and not in the other."""
    deadline = time.monotonic() + 10
    while True:
        shown = screen.text()
        joined = screen.text(joined=True)
        if screen.text() == shown or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    rows = {row.rstrip() for row in shown.split("\n")}
    return [line.rstrip() for line in joined.split("\n") if line.rstrip() not in rows]


def says(shown: str, words: str) -> bool:
    """Whether `words` are on the screen in order, on one row or over several."""
    return f" {words} " in " " + " ".join(shown.split()) + " "


def rows_of(shown: str, first: str, words: list[str]) -> list[str]:
    """The rows on which `words` are shown, from the row containing `first`."""
    rows = [row.rstrip() for row in shown.split("\n")]
    start = next(i for i, row in enumerate(rows) if first in row)
    found: list[str] = []
    for row in rows[start:]:
        found.append(row)
        if " ".join(found).split()[-len(words):] == words:
            return found
    raise AssertionError(f"{words} not shown in order from {first!r}:\n{shown}")


def test_long_messages_wrap_at_word_boundaries_under_their_text_and_code_stays_whole(world, model_server, screens):
    """Wrapped by the terminal, a long line broke mid-word at its edge and ran on at the
    first column, under the time; each message is now wrapped between words, its rows under
    its text (a list item's under the item); code and table rows are cut at the edge."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=session, role="user", content=LONG, channel="telegram", sender_name="Priya", notify=False)
    message_append(session=session, role="assistant", channel="tui", sender_name="Aria", notify=False,
                   content=f"Here:\n```python\n{CODE}\n```\n{TABLE}\nDone, with a closing sentence that is long "
                           "enough to reach the edge.")
    bullet = "- a bullet item that is long enough to wrap over the edge"
    model_server.add(reply("Sure. " + " ".join(WORDS[:30]) + "\n" + bullet, chunk_delay=0.01))
    screen = screens(qorven_env(model_server), "--no-server", width=50)
    screen.type("hello")
    screen.key("Enter")
    shown = screen.wait_until(lambda text: says(text, bullet) and last_row(text) == PROMPT, "the reply")
    assert terminal_wrapped(screen) == [], shown  # code and table rows too: they go on after a mark

    priya = rows_of(shown, "Priya:", LONG.split())
    under = priya[0].index("This")
    assert all(row[:under].isspace() and row[under] != " " for row in priya[1:]), shown
    assert " ".join(row.strip() for row in priya).endswith(LONG), shown
    aria = rows_of(shown, "Done, with", "Done, with a closing sentence that is long enough to reach the edge.".split())
    assert len(aria) > 1 and all(row.startswith(" " * len("00:00 Aria: ")) for row in aria), shown

    streamed = rows_of(shown, "… Sure.", ["Sure.", *WORDS[:30]])
    assert len(streamed) > 1 and all(row.startswith("  w") for row in streamed[1:]), shown
    item = rows_of(shown, "- a bullet", bullet.split())
    assert item[0].startswith("  - a bullet") and len(item) > 1
    assert all(row.startswith("    ") and row[4] != " " for row in item[1:]), shown
    screen.key("C-d")
    assert screen.exit_code() == 0


def test_a_long_code_line_goes_on_after_a_mark_on_further_rows(world, model_server, screens):
    """A code line wider than a narrow terminal ran past its edge, which broke it at the
    first column (and while it streamed, it was shown cut at the edge)."""
    model_server.add(reply(f"Here:\n```python\n{CODE}\n```\nDone.", chunk_delay=0.01))
    screen = screens(qorven_env(model_server), "--no-server", width=40)
    screen.type("code please")
    screen.key("Enter")
    shown = screen.wait_until(lambda text: "Done." in text and last_row(text) == PROMPT, "the reply")
    assert terminal_wrapped(screen) == [], shown
    rows = [row.rstrip() for row in shown.split("\n")]
    start = next(i for i, row in enumerate(rows) if "def a_very" in row)
    code = rows[start:rows.index("  ```", start)]
    assert len(code) > 1 and all(row.startswith(f"  {CONTINUED}") for row in code[1:]), shown
    assert code[0][2:] + "".join(row[2 + len(CONTINUED):] for row in code[1:]) == CODE, shown
    screen.key("C-d")
    assert screen.exit_code() == 0


def test_after_the_terminal_is_resized_what_is_printed_wraps_to_its_new_width(world, model_server, screens):
    model_server.add(reply(" ".join(WORDS[:40]), chunk_delay=0.01))
    screen = screens(qorven_env(model_server), "--no-server", width=100)
    screen.resize(36)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=session, role="user", content=LONG, channel="telegram", sender_name="Priya", notify=False)
    screen.wait_for("Priya:")
    screen.type("hello")
    screen.key("Enter")
    shown = screen.wait_until(lambda text: "w39" in text and last_row(text) == PROMPT, "the reply")
    # The lines printed before at 100 columns the terminal wraps anew; none printed since.
    assert [line for line in terminal_wrapped(screen) if "appear here" not in line] == [], shown
    assert len(rows_of(shown, "… w00", WORDS[:40])) > 3, shown
    assert " ".join(row.strip() for row in rows_of(shown, "Priya:", LONG.split())).endswith(LONG), shown
    screen.key("C-d")
    assert screen.exit_code() == 0


def test_questions_read_from_a_file_are_wrapped_to_the_terminals_width(world, model_server, tmp_path):
    """`qorven chat < questions.txt` on a terminal: nothing was wrapped (words cut at its edge)."""
    questions = tmp_path / "questions.txt"
    questions.write_text("hello\n")
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=session, role="user", content=LONG, channel="telegram", sender_name="Priya", notify=False)
    model_server.add(reply(" ".join(WORDS[:30]), chunk_delay=0.01))
    screen = Screen(["sh", "-c", f"{shlex.join([*CHAT, '--no-server'])} < {shlex.quote(str(questions))}"],
                    env=qorven_env(model_server), cwd=ROOT, tmp=tmp_path, width=50)
    try:
        assert screen.exit_code() == 0
        shown = screen.text()
        assert terminal_wrapped(screen) == [] and says(shown, LONG) and says(shown, " ".join(WORDS[:30])), shown
    finally:
        screen.close()


def test_closing_the_terminal_window_signs_the_terminal_out(world, model_server, server, screens):
    """A terminal window closed (its program sent SIGHUP) leaves as Ctrl-D does: the token
    the terminal made for the server is revoked, not left working for TOKEN_LIFETIME."""
    screen = screens(server)
    chats = processes_with("QORVEN_PUBLIC_URL", server["QORVEN_PUBLIC_URL"])
    screen.close_window()
    deadline = time.monotonic() + 30
    while ApiToken.objects.get(name="qorven chat").revoked_at is None:
        assert time.monotonic() < deadline, f"the closed terminal's token still works; {processes_state(chats)}"
        time.sleep(0.1)


@pytest.mark.parametrize("to", ["process", "another-thread"])
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_a_reply_streams_ends_the_terminal_at_once_signed_out(world, model_server, server, screens,
                                                                               stop, to):
    """A SIGTERM or SIGHUP that came while the reply was being painted was raised inside the
    prompt's event loop, which could then wait for ever on its way out: the process stayed,
    its terminal gone. It ends the prompt as Ctrl-D does: exit 128 + the signal, signed out.
    Also when the kernel hands it to a thread other than the main one (the prompt's loop is
    woken by Python's wake-up descriptor; terminal_input has why it matters)."""
    model_server.add(reply(" ".join(WORDS), chunk_delay=0.05))
    screen = screens(server)
    screen.type("tell me the words")
    screen.key("Enter")
    screen.wait_for(WORDS[3])
    (chat,) = [pid for pid in processes_with("QORVEN_PUBLIC_URL", server["QORVEN_PUBLIC_URL"])
               if b"chat" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    if to == "process":
        os.kill(chat, stop)
    else:
        signal_another_thread(chat, stop)
    assert screen.exit_code(seconds=30) == 128 + stop
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


def processes_with(name: str, value: str) -> list[int]:
    """The processes started with `name`=`value` in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"{name}={value}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def processes_state(pids: list[int]) -> str:
    """What each process is doing, thread by thread (Linux's state and wait channel): what
    a test that waits on a process for nothing can say of it."""
    said = []
    for pid in pids:
        try:
            command = (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))[:80]
            threads = [f"{(task / 'comm').read_text().strip()}: {(task / 'stat').read_text().rsplit(')', 1)[1].split()[0]}"
                       f" in {(task / 'wchan').read_text() or '-'}" for task in Path(f"/proc/{pid}/task").iterdir()]
            said.append(f"{pid} ({command}): " + ", ".join(threads))
        except OSError:
            said.append(f"{pid}: ended")
    return "; ".join(said) or "no such process"


@pytest.mark.parametrize("asked", ["--no-color", "NO_COLOR"])
def test_no_color_asked_for_is_no_color_on_the_screen(world, model_server, screens, asked):
    """`--no-color` (which --help lists) and the NO_COLOR convention (no-color.org) were
    ignored: the time, the channel and the names still came in colour."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=session, role="user", content="hello", channel="telegram", sender_name="Priya", notify=False)
    model_server.add(reply("Hi there."))
    env = qorven_env(model_server)
    if asked == "NO_COLOR":
        screen = screens({**env, "NO_COLOR": "1"}, "--no-server")
    else:
        screen = screens(env, "--no-server", asked)
    screen.type("hi")
    screen.key("Enter")
    screen.wait_for("Hi there.")
    shown = screen.text(escapes=True)
    assert "Priya: hello" in shown and "\x1b[" not in shown, repr(shown)
    screen.key("C-d")
    assert screen.exit_code() == 0


class _Healthy(BaseHTTPRequestHandler):
    """A server that says it is Qorven (/healthz) and drops every other request unanswered:
    one going down mid-request."""

    def do_GET(self) -> None:
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def going_away():
    """A server the terminal finds at its start, and its stop()."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    stopped = []

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()
        stopped.append(True)

    yield f"http://127.0.0.1:{httpd.server_address[1]}", stop
    if not stopped:
        stop()


def test_a_message_the_server_did_not_take_is_said_so_and_back_on_the_prompt(world, model_server, screens,
                                                                           going_away):
    """The server gone for a moment (restarting) when a message is sent: the terminal
    ended with a traceback and the message was lost. It now says so, keeps running, and
    the message is back on the prompt to send again."""
    url, stop = going_away
    screen = screens(qorven_env(model_server), "--server", url)
    stop()
    screen.type("a message worth keeping")
    screen.key("Enter")
    shown = screen.wait_for(f"the server at {url} did not answer")
    assert "Traceback" not in shown
    screen.wait_until(lambda text: last_row(text) == f"{PROMPT} a message worth keeping", "the message, back")
    assert not screen.exit_file.exists()
    screen.key("C-u", "C-d")
    assert screen.exit_code() == 0


def test_ctrl_c_twice_while_a_message_waits_for_a_server_that_does_not_answer_leaves_at_once(
        world, model_server, silent_server, screens):
    """Two Ctrl-C while the message waited for a server that took it and never answered
    were noted and acted on only once the send's 30 s had run out: the terminal said the
    message had not gone, then left. The second Ctrl-C now leaves at once, as it does
    anywhere else, signed out."""
    screen = screens({**qorven_env(model_server), "QORVEN_PUBLIC_URL": silent_server}, "--server", silent_server)
    screen.type("hello")
    screen.key("Enter")
    assert Silent.came.wait(60), screen.text()
    screen.key("C-c")
    time.sleep(0.3)  # a person's two presses: two signals (sent together, the kernel may merge them)
    screen.key("C-c")
    assert screen.exit_code(seconds=90) == 0
    assert "did not answer" not in screen.text()
    assert "Traceback" not in screen.text()
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


def test_a_signal_while_a_message_waits_for_a_server_that_does_not_answer_ends_the_terminal_at_once(
        world, model_server, silent_server, screens):
    """Sent between two prompts, the message waited for the server on the main thread: a
    closed window's SIGHUP was acted on once the send's 30 s had run out, the message said
    not to have been sent the while."""
    screen = screens({**qorven_env(model_server), "QORVEN_PUBLIC_URL": silent_server}, "--server", silent_server)
    screen.type("hello")
    screen.key("Enter")
    assert Silent.came.wait(60), screen.text()
    (chat,) = [pid for pid in processes_with("QORVEN_PUBLIC_URL", silent_server)
               if b"chat" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    os.kill(chat, signal.SIGHUP)
    assert screen.exit_code(seconds=90) == 128 + signal.SIGHUP
    assert "did not answer" not in screen.text()
    assert ApiToken.objects.get(name="qorven chat").revoked_at is not None


def test_a_server_that_never_answers_is_said_so_at_each_try_and_the_line_comes_back(world, model_server,
                                                                                  silent_server, screens):
    """A server that takes the message and never answers: each try waited its whole read
    timeout (30 s) and the first went by in silence; then "The connection was lost before the
    server answered; sending again in 2 s." as if it had dropped, four times in all (126 s).
    Now each try after the first says the server is not answering and which try it is; the
    line back on the prompt, sent again as it is, goes under the same Idempotency-Key."""
    screen = screens({**qorven_env(model_server), "QORVEN_PUBLIC_URL": silent_server}, "--server", silent_server,
                     "--timeout", "1")
    screen.type("hello")
    screen.key("Enter")
    gave_up = f"the server at {silent_server} did not answer"
    shown = screen.wait_for(gave_up)
    for n in (2, 3, 4):
        assert shown.count(f"The server is not answering (nothing in 1 s); sending again, try {n} of 4.") == 1, shown
    assert "connection was lost" not in shown
    screen.wait_until(lambda text: last_row(text) == f"{PROMPT} hello", "the line, back")
    assert len(Silent.keys) == 4 and len(set(Silent.keys)) == 1 and Silent.keys[0]
    screen.key("Enter")  # sent again as it came back: the same message, under its key
    screen.wait_until(lambda text: text.count(gave_up) == 2, "the second round given up")
    assert len(Silent.keys) == 8 and len(set(Silent.keys)) == 1


def test_ctrl_c_while_a_server_is_not_answering_gives_the_line_back(world, model_server, silent_server, screens):
    """Once the terminal has said the server is not answering, Ctrl-C stops waiting: the
    line is back on the prompt at once, no more tries are sent, and sent again it goes
    under the same Idempotency-Key (stored once, if the server had it after all). Before,
    the Ctrl-C was only noted, and the line came back once every try had run out."""
    screen = screens({**qorven_env(model_server), "QORVEN_PUBLIC_URL": silent_server}, "--server", silent_server,
                     "--timeout", "10")
    screen.type("hello")
    screen.key("Enter")
    screen.wait_for("try 2 of 4")
    while len(Silent.keys) < 2:  # the second try on its way
        time.sleep(0.05)
    screen.key("C-c")
    shown = screen.wait_until(lambda text: last_row(text) == f"{PROMPT} hello", "the line, back")
    assert "Stopped waiting for the server" in shown, shown
    assert "did not answer" not in shown and "try 3 of 4" not in shown
    assert len(Silent.keys) == 2
    screen.key("Enter")
    screen.wait_until(lambda text: len(Silent.keys) >= 3, "the line sent again")
    assert len(set(Silent.keys)) == 1
    screen.key("C-c")
    time.sleep(0.3)  # a person's two presses: two signals (sent together, the kernel may merge them)
    screen.key("C-c")
    assert screen.exit_code(seconds=90) == 0
