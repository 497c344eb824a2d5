"""`qorven chat`: the terminal surface, in a subprocess against the test database."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from channels_app.management.commands.chat import SEND_TIMEOUT
from channels_app.chat import chat_owner
from channels_app.terminal import HumanPrinter, Pending
from channels_app.terminal_follow import Follower
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The URL of the database this test runs on, for a subprocess to share it."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def qorven_env(model_server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL",)}
    env.update(
        DATABASE_URL=database_url(), DJANGO_SECRET_KEY=env.get("DJANGO_SECRET_KEY", "terminal-test"),
        CELERY_BROKER_URL="",  # the turn runs in the chat process itself, as without a broker
        OPENAI_BASE_URL=model_server.base_url, OPENAI_API_KEY="k", QORVEN_MODEL="scripted-model",
        QORVEN_LOG_LEVEL="WARNING",
        QORVEN_PUBLIC_URL="http://127.0.0.1:9",  # no server answers there: the terminal works on the database
    )
    return env


def test_chat_json_round_trip_streams_the_reply_then_stores_it(world, model_server):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message_append(session=session, role="assistant", content="earlier, on telegram", channel="telegram",
                   sender_name="Aria", notify=False)
    # Streamed as a model does, over time (6 chunks, 50 ms apart): all at once, the stored
    # reply can reach the client before its chunks, and a stored reply is never streamed again.
    model_server.add(reply("Hello from the terminal side.", chunk_delay=0.05))
    qorven = Path(sys.executable).with_name("qorven")
    done = subprocess.run(
        [str(qorven), "chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--history", "1",
         "--wait", "60"],
        input=json.dumps({"content": "hi from tui"}) + "\n", capture_output=True, text=True, cwd=ROOT,
        env=qorven_env(model_server), timeout=180,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [line["type"] for line in lines]
    assert lines[0]["content"] == "earlier, on telegram" and lines[0]["channel"] == "telegram"
    assert lines[1] == {**lines[1], "type": "message", "role": "user", "channel": "tui", "content": "hi from tui"}
    chunks = [line for line in lines if line["type"] == "chunk"]
    assert {c["reply_to"] for c in chunks} == {lines[1]["seq"]}
    assert len(chunks) > 1 and "".join(c["delta"] for c in chunks) == "Hello from the terminal side."
    final = next(line for line in lines[2:] if line["type"] == "message" and line["role"] == "assistant")
    assert final["content"] == "Hello from the terminal side." and final["channel"] == "tui"
    assert kinds.index("chunk") < kinds.index("done")
    assert kinds.index("chunk") < lines.index(final)
    assert Message.objects.filter(session=session, channel="tui").count() == 2
    assert len(model_server.requests) == 1


def test_reasoning_taken_back_mid_reply_is_said_so_and_the_answer_streams_again(world, model_server):
    """A thinking model's reasoning with no opening tag streams until its closing tag;
    then the terminal is told the text so far was not the answer (`restart`), and what
    streams after is the answer alone, as stored. On a loaded machine the follower's read
    of the database can find the stored reply before its live events arrive: the restart
    then comes from that read, and the answer is shown whole, not streamed
    (test_chat_cursor: the stored reply takes back reasoning whose restart is on its way)."""
    from .test_model_thinking import BARE

    model_server.add(BARE)
    qorven = Path(sys.executable).with_name("qorven")
    done = subprocess.run(
        [str(qorven), "chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--wait", "60"],
        input=json.dumps({"content": "hi"}) + "\n", capture_output=True, text=True, cwd=ROOT,
        env=qorven_env(model_server), timeout=180,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [line["type"] for line in lines]
    assert "greets" in "".join(line["delta"] for line in lines if line["type"] == "chunk")  # it did stream
    last_restart = len(kinds) - 1 - kinds[::-1].index("restart")
    final = next(line for line in lines if line["type"] == "message" and line["role"] == "assistant")
    assert final["content"] == "Hello Priya!" and lines.index(final) > last_restart
    assert "".join(line["delta"] for line in lines[last_restart:] if line["type"] == "chunk") in ("Hello Priya!", "")


def test_a_pipe_reader_is_told_a_taken_back_reply_was_reasoning_and_the_answer_follows_on_its_own_line():
    """What is printed to a pipe cannot be taken back (a terminal clears it:
    test_terminal_screen): a line says it was the model's reasoning."""
    from channels_app.terminal import TAKEN_BACK

    out = io.StringIO()
    printer = HumanPrinter(out, color=False)
    printer({"type": "chunk", "reply_to": 3, "delta": "The user greets me.\n"})
    printer({"type": "restart", "reply_to": 3})
    printer({"type": "chunk", "reply_to": 3, "delta": "Hello Priya!"})
    printer({"type": "message.new", "seq": 4, "role": "assistant", "content": "Hello Priya!", "channel": "tui",
             "sender_name": "Aria", "created_at": "2026-12-05T10:00:00+00:00", "reply_to": 3, "streamed": True})
    assert out.getvalue().splitlines()[-3:] == ["", TAKEN_BACK, "… Hello Priya!"]


def test_a_reply_taken_back_with_no_answer_after_it_ends_on_the_stored_notice():
    """A length limit stopped a model seen writing its reasoning untagged before its
    closing tag: the reasoning is taken back (`restart`) and the stored reply is the
    cut-off notice, which the terminal's last line is."""
    from qorven.agent.turn_endings import CUT_OFF_NOTICE

    out = io.StringIO()
    printer = HumanPrinter(out, color=False)
    printer({"type": "chunk", "reply_to": 3, "delta": "The user asks again. I should weigh"})
    printer({"type": "restart", "reply_to": 3})
    printer({"type": "message.new", "seq": 4, "role": "assistant", "content": CUT_OFF_NOTICE, "channel": "tui",
             "sender_name": "Aria", "created_at": "2026-12-05T10:00:00+00:00", "reply_to": 3, "streamed": False,
             "notice": "cut_off"})
    assert out.getvalue().splitlines()[-1].endswith(f"Aria: {CUT_OFF_NOTICE}")


def test_json_mode_waits_for_the_end_of_each_streamed_reply():
    pending = Pending()
    pending.add(5)
    assert not pending.empty()
    pending.settle({"type": "message.new", "role": "assistant", "reply_to": 5, "seq": 6})
    assert not pending.empty()  # the reply is stored, its stream's `done` is still to come
    pending.settle({"type": "done", "reply_to": 5, "seq": 6})
    assert pending.empty()

    unstreamed = Pending()
    unstreamed.GRACE = 0.1
    unstreamed.add(7)
    unstreamed.settle({"type": "message.new", "role": "system", "reply_to": 7, "seq": 8})
    assert not unstreamed.empty()
    time.sleep(0.15)
    assert unstreamed.empty()  # no `done` follows a reply that was not streamed


def test_chat_json_answers_a_command_without_the_model_and_reports_bad_lines(world, model_server):
    qorven = Path(sys.executable).with_name("qorven")
    done = subprocess.run(
        [str(qorven), "chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice"],
        input='not json\n{"nocontent": 1}\n{"content": "/help"}\n', capture_output=True, text=True, cwd=ROOT,
        env=qorven_env(model_server), timeout=180,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    # A line that is not JSON at all is told so in the same words, not in the JSON parser's.
    assert lines[0] == {"type": "error", "error": 'line 1 is not JSON: each line must be an object like {"content": "…"}'}
    assert lines[1] == {"type": "error", "error": 'each line must be an object like {"content": "…"}'}
    answer = next(line for line in lines if line["type"] == "message" and line["role"] == "assistant")
    assert answer["content"].startswith("Commands:") and answer["notice"] == "command"
    # A reply that did not stream (read back from the database) ends with its "done" too.
    assert [line for line in lines if line["type"] == "done"] == [
        {"type": "done", "reply_to": answer["reply_to"], "seq": answer["seq"]}]
    assert model_server.requests == []


def test_chat_with_a_server_named_that_does_not_answer_says_so(world, model_server):
    qorven = Path(sys.executable).with_name("qorven")
    done = subprocess.run(
        [str(qorven), "chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice",
         "--server", "http://127.0.0.1:9"],
        input="", capture_output=True, text=True, cwd=ROOT, env=qorven_env(model_server), timeout=120,
    )
    assert done.returncode != 0
    assert "no Qorven server answers at http://127.0.0.1:9" in done.stderr


@pytest.mark.parametrize("server", ["notaurl", "127.0.0.1:8000", "ftp://qorven.example"])
def test_chat_with_a_server_that_is_not_a_url_says_so(world, server):
    """`--server notaurl` said "no Qorven server answers at notaurl", as if one could."""
    with pytest.raises(CommandError) as refused:
        call_command("chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--server", server,
                     stdout=io.StringIO())
    assert str(refused.value) == (f"--server {server} is not a URL: give the server's address as "
                                  "http://host:port or https://host (leave out --server to work on the database "
                                  "directly)")


class _Listening:
    """A server that says it is Qorven (/healthz) and takes messages, recording the
    Authorization header of each request it gets."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen = self.seen = []  # (method, path, Authorization)

        class Handler(BaseHTTPRequestHandler):
            def answer(self, status: int, body: bytes) -> None:
                seen.append((self.command, self.path, self.headers.get("Authorization", "")))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.answer(200, b'{"status": "ok"}')

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.answer(201, b'{"message": {"seq": 1, "answer_state": "answered"}}')

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.port = self.httpd.server_address[1]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


OTHER_MACHINE = "qorven.lan.test"  # a name only the proxy resolves: to the listening server


@pytest.fixture
def on_another_machine(http_proxy):
    """A Qorven-looking server reached at http://qorven.lan.test:<port>, a host that is
    not this machine as far as the terminal can tell (through an outbound proxy that
    records what it forwards), and the environment that sends the terminal there."""
    listening = _Listening()
    http_proxy.hosts[OTHER_MACHINE] = "127.0.0.1"
    yield listening, f"http://{OTHER_MACHINE}:{listening.port}"
    listening.stop()


def _chat_through(model_server, http_proxy, *args: str, public_url: str = "http://127.0.0.1:9"):
    env = {k: v for k, v in qorven_env(model_server).items() if k.lower() not in ("no_proxy", "all_proxy")}
    env.update(HTTP_PROXY=http_proxy.url, http_proxy=http_proxy.url, QORVEN_PUBLIC_URL=public_url)
    return subprocess.run(
        [str(Path(sys.executable).with_name("qorven")), "chat", "--json", "--tenant", "acme", "--qor", "aria",
         "--user", "alice", "--wait", "1", *args],
        input=json.dumps({"content": "my bank's PIN is 4321"}) + "\n", capture_output=True, text=True, cwd=ROOT,
        env=env, timeout=120,
    )


def test_chat_does_not_send_its_token_over_plain_http_to_another_machine(world, model_server, http_proxy,
                                                                        on_another_machine):
    """`--server http://…` sent the person's sign-in token (and their messages) to any
    host that answered /healthz with JSON, unencrypted across the network."""
    listening, url = on_another_machine
    done = _chat_through(model_server, http_proxy, "--server", url)
    assert listening.seen == [] and http_proxy.requests == []
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"--server {url} is plain http to another machine: the terminal's sign-in token and "
        "your messages would cross the network unencrypted. Give its https:// address, or --insecure-http "
        "to send them anyway"]
    assert not Message.objects.exists()


def test_chat_does_not_follow_a_plain_http_public_url_to_another_machine(world, model_server, http_proxy,
                                                                        on_another_machine):
    """Without --server the terminal looks for the server at QORVEN_PUBLIC_URL: the same
    rule, and the error names that setting and the ways out."""
    listening, url = on_another_machine
    done = _chat_through(model_server, http_proxy, public_url=url)
    assert listening.seen == [] and http_proxy.requests == []
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"QORVEN_PUBLIC_URL {url} is plain http to another machine: the terminal's sign-in token "
        "and your messages would cross the network unencrypted. Give --server with its https:// address, "
        "--no-server to work on the database directly, or --insecure-http to send them anyway"]


@pytest.mark.parametrize("named", ["--server", "QORVEN_PUBLIC_URL"])
def test_chat_talks_plain_http_to_another_machine_when_told_to(world, model_server, http_proxy,
                                                              on_another_machine, named):
    listening, url = on_another_machine
    args = ("--server", url) if named == "--server" else ()
    done = _chat_through(model_server, http_proxy, *args, "--insecure-http", public_url=url)
    assert "CommandError" not in done.stderr, done.stderr
    (post,) = [(path, auth) for method, path, auth in listening.seen if method == "POST"]
    assert post[0] == "/v1/qors/aria/messages" and post[1].startswith("Bearer ")


@pytest.mark.parametrize("server", ["http://localhost:9", "http://127.8.9.10:9", "http://[::1]:9",
                                    "https://qorven.lan.test:9"])
def test_chat_talks_plain_http_to_this_machine_and_https_anywhere(world, server):
    """Loopback (127.0.0.0/8, ::1, localhost) never leaves the machine; https is encrypted."""
    with pytest.raises(CommandError) as refused:
        call_command("chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--server", server,
                     stdout=io.StringIO())
    assert str(refused.value).startswith(f"no Qorven server answers at {server} ")


def test_chat_refuses_someone_who_is_not_a_member(world):
    qorven = Path(sys.executable).with_name("qorven")
    env = {**os.environ, "DATABASE_URL": database_url(),
           "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "t")}
    done = subprocess.run(
        [str(qorven), "chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "charlie"],
        input="", capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )
    assert done.returncode != 0 and "member" in done.stderr


def test_the_follower_keeps_following_when_the_chat_starts_a_session(world):
    """The chat has no session when the follower starts; the first message (stored by
    another process, found by polling) starts one, and the follower joins its group: later
    messages still arrive (on the Redis pub/sub layer in CI's second pass too)."""
    with following(world) as (follower, seen):
        session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
        message_append(session=session, role="user", content="first", channel="telegram", notify=False)
        wait_for(seen, "first")
        for text in ("second", "third"):
            message_append(session=session, role="user", content=text, channel="telegram")
        wait_for(seen, "third")
        assert follower._thread.is_alive()
    assert [e["content"] for e in seen if e["type"] == "message.new"] == ["first", "second", "third"]


@contextmanager
def following(world, *, history: int = 0):
    """Alice's terminal follower (polling every 0.2 s) and what it has shown."""
    owner = chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria")
    seen: list[dict] = []
    follower = Follower(owner, seen.append, poll_every=0.2)
    follower.start(history=history)
    try:
        yield follower, seen
    finally:
        follower.stop()


def wait_for(seen: list[dict], content: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not any(e.get("content") == content for e in seen) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_follower_shows_messages_from_other_channels_while_waiting(world, settings):
    """Another process's append (not broadcast here) is found by following seq."""
    with following(world, history=20) as (_, seen):
        session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
        message_append(session=session, role="user", content="from my phone", channel="telegram",
                       sender_name="Alice", notify=False)
        wait_for(seen, "from my phone")
    shown = [e for e in seen if e["type"] == "message.new"]
    assert [(e["channel"], e["content"]) for e in shown] == [("telegram", "from my phone")]
    out = io.StringIO()
    HumanPrinter(out, color=False)(shown[0])
    assert "[telegram] Alice: from my phone" in out.getvalue()


def test_in_legacy_mode_the_terminal_reads_the_session_it_writes_to(world, model_server):
    model_server.add(reply("A legacy reply."))
    qorven = Path(sys.executable).with_name("qorven")
    done = subprocess.run(
        [str(qorven), "chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--wait", "60"],
        input=json.dumps({"content": "hi in legacy mode"}) + "\n", capture_output=True, text=True, cwd=ROOT,
        env={**qorven_env(model_server), "QORVEN_LEGACY_SESSIONS": "1"}, timeout=180,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    said = [(line["role"], line["content"]) for line in lines if line["type"] == "message"]
    assert said == [("user", "hi in legacy mode"), ("assistant", "A legacy reply.")]
    stored = Message.objects.get(role="assistant")
    assert (stored.session.kind, stored.session.channel) == ("legacy", "tui")


def test_on_the_pubsub_layer_the_follower_hears_a_reply_streamed_right_after_it_starts(world, settings):
    """The terminal follows the chat from its first chunk (start() joins first). On the
    Redis pub/sub layer a join is live only once Redis has taken it: with the terminal 50 ms
    farther from Redis than the worker, a chunk the worker streams the moment start()
    returns must still be shown (the follower does not poll the database in this test)."""
    from asgiref.sync import async_to_sync
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from qorven.runtime.publisher import session_group

    from ..fakes.slow_link import SlowLink
    from ..processes import redis_of_our_own

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    asked = message_append(session=session, role="user", content="hello", channel="web", notify=False).message
    port, redis = redis_of_our_own()
    try:
        with SlowLink.in_thread(port, delay=0.05) as far:
            settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                                                   "CONFIG": {"hosts": [{"address": f"redis://127.0.0.1:{far}/0"}]}}}
            owner = chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria")
            seen: list[dict] = []
            follower = Follower(owner, seen.append, poll_every=3600)
            follower.start(history=0)
            try:
                async def stream() -> None:
                    worker = RedisPubSubChannelLayer(hosts=[{"address": f"redis://127.0.0.1:{port}/0"}])
                    group = session_group(session.pk)
                    await worker.group_send(group, {"type": "message.chunk", "session_id": session.pk,
                                                    "reply_to": asked.seq, "delta": "Hi Alice", "offset": 0,
                                                    "group": group})
                    await worker.flush()

                async_to_sync(stream)()
                deadline = time.monotonic() + 3
                while not any("Hi Alice" in json.dumps(e) for e in seen) and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                follower.stop()
    finally:
        redis.terminate()
        redis.wait(10)
    assert [e for e in seen if "Hi Alice" in json.dumps(e)], f"the streamed chunk was never shown: {seen}"


def test_the_terminals_token_lapses_unless_the_running_terminal_renews_it(world, monkeypatch):
    """A terminal killed without a chance to revoke its token (SIGKILL, a lost machine)
    leaves a token that stops working within TOKEN_LIFETIME; a running one renews it."""
    from django.utils import timezone

    from channels_app import terminal_client
    from tenancy.models import ApiToken
    from tenancy.selectors import api_token_authenticate

    monkeypatch.setattr(terminal_client, "TOKEN_RENEW_EVERY", 0.05)
    owner = chat_owner(user=world.alice, tenant_slug="acme", qor_slug="aria", surface="tui")
    link = terminal_client.ServerLink(owner, "http://127.0.0.1:9", timeout=SEND_TIMEOUT)
    try:
        first = ApiToken.objects.get(pk=link.token_row.pk).expires_at
        assert timezone.now() < first <= timezone.now() + terminal_client.TOKEN_LIFETIME
        assert api_token_authenticate(raw=link.token) is not None
        # Sent in a header, never in the socket's URL, which servers and proxies log.
        assert link.token not in link.socket_url(session_id=1, last_seq=0)
        assert link.socket_headers() == {"Authorization": f"Bearer {link.token}"}
        deadline = time.monotonic() + 10
        while ApiToken.objects.get(pk=link.token_row.pk).expires_at == first:  # renewed while it runs
            assert time.monotonic() < deadline, "the running terminal did not renew its token"
            time.sleep(0.05)
    finally:
        link.close()
    row = ApiToken.objects.get(pk=link.token_row.pk)
    assert row.revoked_at is not None and api_token_authenticate(raw=link.token) is None
    time.sleep(0.2)
    assert ApiToken.objects.get(pk=link.token_row.pk).expires_at == row.expires_at  # no renewing after it left


def test_chat_reading_a_pipe_prints_the_timeline_as_lines(world, model_server):
    qorven = Path(sys.executable).with_name("qorven")
    done = subprocess.run(
        [str(qorven), "chat", "--tenant", "acme", "--qor", "aria", "--user", "alice"],
        input="/help\n", capture_output=True, text=True, cwd=ROOT, env=qorven_env(model_server), timeout=180,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.endswith(" Alice: /help") for line in lines), done.stdout
    assert any(": Commands:" in line for line in lines), done.stdout
    assert "\x1b" not in done.stdout  # not a terminal: no colours, no prompt


def test_a_script_reading_the_terminal_from_a_pipe_sees_a_lost_access_as_exit_3(world, model_server):
    """The person removed from the workspace while a script holds the terminal's input
    open: it says so and exits 3 at once, without waiting for a line it could not send."""
    import queue
    import threading

    qorven = Path(sys.executable).with_name("qorven")
    proc = subprocess.Popen([str(qorven), "chat", "--tenant", "acme", "--qor", "aria", "--user", "alice"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=qorven_env(model_server))
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        while "Messages from every channel appear here" not in lines.get(timeout=120):
            pass
        world.alice.memberships.all().delete()
        assert proc.wait(60) == 3, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait(10)
    shown = []
    while not lines.empty():
        shown.append(lines.get())
    assert any(line.rstrip().endswith("! You no longer have access to this workspace.") for line in shown), shown
    assert "no longer has access" in proc.stderr.read()



def test_chat_json_says_a_message_the_server_did_not_answer_may_not_be_sent_and_goes_on(world, model_server):
    """A server that drops the request (going down as it came): the terminal died with a
    traceback and the lines after it were never read. Now each is sent again, bounded,
    then reported, and the next line is read."""
    import threading
    from http.server import ThreadingHTTPServer

    from .test_terminal_screen import _Healthy

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        done = subprocess.run(
            [str(Path(sys.executable).with_name("qorven")), "chat", "--json", "--tenant", "acme", "--qor", "aria",
             "--user", "alice", "--server", url],
            input=json.dumps({"content": "one"}) + "\n" + json.dumps({"content": "two"}) + "\n",
            capture_output=True, text=True, cwd=ROOT, env=qorven_env(model_server), timeout=120,
        )
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    # Each message is sent four times in all (its Idempotency-Key makes that safe), the
    # three waits said, then it is given up on with the error; the next line is read.
    told = [line.get("content") if line["type"] == "notice" else line for line in lines]
    again = "The connection was lost before the server answered; sending again in 2 s."
    gave_up = {"type": "error", "error": f"the server at {url} did not answer: the message may not have been sent "
                                       "(sent again now, as it is, it is stored once)"}
    assert told == ([again] * 3 + [gave_up]) * 2


def test_a_question_piped_into_chat_prints_its_answer_before_it_ends(world, model_server):
    """`echo question | qorven chat` printed the question and ended: the answer was
    written (the turn ran in the chat's own process) but never shown. Reading a pipe, the
    terminal now waits for the replies at the end of its input, as --json does."""
    model_server.add(reply("The answer is 42.", chunk_delay=0.05))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("qorven")), "chat", "--tenant", "acme", "--qor", "aria", "--user", "alice",
         "--wait", "60"],
        input="what is the answer?\n", capture_output=True, text=True, cwd=ROOT, env=qorven_env(model_server),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-2:] == [lines[-2], "… The answer is 42."] and lines[-2].endswith(" Alice: what is the answer?"), \
        done.stdout


def test_history_counts_the_messages_it_prints_not_the_qors_working(world):
    """`--history 3` after a turn that used tools printed one message: the tool calls and
    their results took the other places, and are never shown."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="tui", user=world.alice)
    for role, content in (("user", "q1"), ("assistant", "a1"), ("user", "q2")):
        message_append(session=session, role=role, content=content, channel="tui", notify=False)
    call = {"id": "c1", "type": "function", "function": {"name": "memory_search", "arguments": "{}"}}
    message_append(session=session, role="assistant", content="", channel="tui", tool_calls=[call], notify=False)
    for n in range(3):
        message_append(session=session, role="tool", content=f"result {n}", channel="tui", tool_call_id="c1",
                       notify=False)
    message_append(session=session, role="assistant", content="a2", channel="tui", notify=False)
    with following(world, history=3) as (_, seen):
        pass
    assert [e["content"] for e in seen if e["type"] == "message.new"] == ["a1", "q2", "a2"]


def test_chat_with_a_qor_that_is_not_there_names_the_workspaces_qors(world):
    """A mistyped --qor said "no qor 'arya' (is 'alice' a member of 'acme'?)": she is, and
    the question sent her looking at her membership instead of the Qor's name."""
    from tests.factories.tenancy import QorFactory

    QorFactory(tenant=world.tenant_a, slug="nova", is_default=False)
    with pytest.raises(CommandError) as refused:
        call_command("chat", "--json", "--no-server", "--tenant", "acme", "--qor", "arya", "--user", "alice",
                     stdout=io.StringIO())
    assert str(refused.value) == "no Qor 'arya' in 'acme': its Qors are aria, nova"
    with pytest.raises(CommandError) as refused:  # another workspace's Qors are never named
        call_command("chat", "--json", "--no-server", "--tenant", "globex", "--qor", "aria", "--user", "alice",
                     stdout=io.StringIO())
    assert str(refused.value) == "no tenant 'globex' (is 'alice' a member of 'globex'?)"


def test_chat_says_when_no_server_answers_and_it_works_on_the_database_alone(world, model_server):
    """`make run PORT=8080` then `qorven chat` without --server: no server answered at
    QORVEN_PUBLIC_URL's :8000, and the terminal went on on the database without a word, so
    the page open on :8080 did not show its messages live and nothing said why."""
    qorven = Path(sys.executable).with_name("qorven")
    command = [str(qorven), "chat", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--history", "0"]
    alone, asked = (subprocess.run(argv, input="", capture_output=True, text=True, cwd=ROOT,
                                   env=qorven_env(model_server), timeout=180)
                    for argv in (command, [*command, "--no-server"]))
    assert alone.returncode == 0, alone.stderr
    assert ("No Qorven server answers at http://127.0.0.1:9: working on the database alone (give the running "
            "server's address with --server URL for its pages to show this chat live)") in alone.stdout, alone.stdout
    assert asked.returncode == 0 and "server" not in asked.stdout.lower(), asked.stdout  # --no-server: as asked
