from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from channels_app.models import Identity, OutboundDelivery
from channels_app.services import binding_create
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.trust import Trust

from ..ports import free_port

from .browser_support import _chromium, browser, browser_database, chat_server  # noqa: F401 (fixtures of the browser tests)
from .export_world import lives, photo  # noqa: F401 (fixtures of the export tests)


@pytest.fixture
def server(world, model_server, tmp_path):
    """`qorven serve` on the test database; turns run inside it (no broker). Gives the
    environment for a `qorven chat` that talks to it."""
    from .test_terminal import qorven_env

    with served(qorven_env(model_server), tmp_path) as env:
        yield env


@contextmanager
def served(env: dict[str, str], tmp_path: Path):
    """`qorven serve` with `env` (qorven_env's, and what a test changes) on a free port,
    once it answers; gives `env` with QORVEN_PUBLIC_URL set to it."""
    from .test_terminal import ROOT

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**env, "QORVEN_PUBLIC_URL": base}
    log = open(tmp_path / "server.log", "w")
    qorven = str(Path(sys.executable).with_name("qorven"))
    proc = subprocess.Popen([qorven, "serve", "--no-migrate", "--no-beat", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.2)
        yield env
    finally:
        # Killed outright, as the browser tests' server is: no test of this fixture is about the
        # server's stop, and a stop lets the turns still running finish first (a reply the
        # terminal left streaming kept the server 2 to 16 s after the test).
        os.killpg(proc.pid, signal.SIGKILL)  # its process group (start_new_session)
        proc.wait(30)
        log.close()


@pytest.fixture
def telegram(world):
    return binding_create(
        tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
        credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"},
    )


@pytest.fixture
def whatsapp(world):
    return binding_create(
        tenant=world.tenant_a, qor=world.qor_a, kind="whatsapp",
        credentials={"phone_number_id": "1055", "token": "wa-token", "app_secret": "wa-app-secret",
                     "verify_token": "wa-verify"},
    )


def pair(world, channel: str, external_id: str, user, trust=Trust.OWNER) -> Identity:
    return Identity.objects.create(
        tenant=world.tenant_a, channel=channel, external_id=external_id, user=user,
        approval=Identity.Approval.APPROVED, trust_level=trust, display_name=user.first_name,
    )


def replies_waiting(world, telegram, texts: list[str], *, not_before=None) -> list:
    """Replies to Alice (paired as Telegram sender 42) whose parts wait for the bot, as a
    busy bot or a dead worker leaves them, oldest first."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    messages = []
    for text in texts:
        message = message_append(session=session, role="assistant", content=text, channel="telegram",
                                 notify=False).message
        OutboundDelivery.objects.create(tenant=world.tenant_a, message=message, part=0, binding=telegram,
                                        target="42", text=text, not_before=not_before)
        messages.append(message)
    return messages


def answered_on_telegram(client, world, platform, model_server, drain, *, asked: str, answer: str):
    """Alice, paired as Telegram sender 42, writes `asked`; the model answers `answer`; once
    everything queued has run, the one sendMessage the platform got."""
    from ..fakes.model_server import reply
    from .payloads import post_telegram, telegram_update

    pair(world, "telegram", "42", world.alice)
    model_server.add(reply(answer))
    assert post_telegram(client, telegram_update(asked)).status_code == 200
    drain()
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    return sent


@pytest.fixture
def email(world):
    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="email",
                          credentials={"address": "aria@acme.example", "secret": "mail-secret"})


@pytest.fixture
def sms(world, settings):
    settings.QORVEN_PUBLIC_URL = "https://qorven.example"
    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="sms",
                          credentials={"number": "+15550001111", "account_sid": "AC123", "auth_token": "twilio-token"})


@contextmanager
def gates_held_elsewhere(*keys: str):
    """Send gates (channels_app.send_gate: a bot's, a worker's send slots) held by another
    send for the block: taken on a thread of its own, with a database connection of its
    own, as another worker's send holds them."""
    from django.db import connection

    from channels_app.send_gate import gates_held

    taken, done, held = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with gates_held(list(keys)) as free:
                held.append(free)
                taken.set()
                done.wait(60)
        finally:
            taken.set()
            connection.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        assert taken.wait(10) and held == [True], f"{keys} were not free"
        yield
    finally:
        done.set()
        thread.join(10)


class Silent(BaseHTTPRequestHandler):
    """A server that says it is Qorven (/healthz) and takes a message without ever
    answering it: one stuck mid-request."""

    came = threading.Event()  # a message is being sent
    released = threading.Event()  # the test is over: the request may end
    keys: list[str] = []  # the Idempotency-Key of each message request, in the order they came

    def do_GET(self) -> None:
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        type(self).keys.append(self.headers.get("Idempotency-Key", ""))
        type(self).came.set()
        type(self).released.wait(120)
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def silent_server():
    """A `Silent` server's URL."""
    Silent.came.clear()
    Silent.released.clear()
    Silent.keys.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    Silent.released.set()
    httpd.shutdown()
    httpd.server_close()
