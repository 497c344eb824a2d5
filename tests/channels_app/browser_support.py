"""What the browser tests share: Debian's chromium driven by Playwright, against a real
`qorven serve` subprocess on its own database, a scripted model server and a
fake Telegram API. Screenshots go to test-artifacts/."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from ..fakes.model_server import ModelServer
from ..fakes.platform_server import PlatformServer
from ..processes import free_port
from .payloads import telegram_update

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PASSWORD = "browser-test-pw"

SETUP = """
from django.core.management import call_command
from channels_app.models import Identity
from tenancy.models import Tenant
from django.contrib.auth import get_user_model
call_command("migrate", verbosity=0)
call_command("bootstrap", tenant="acme", qor="aria", owner="alice", password={password!r}, qor_name="Aria")
call_command("bind", "telegram", "--tenant", "acme", "--qor", "aria", "--token", "111:AAA", "--secret", "tg-secret",
             "--username", "aria_bot")
call_command("bind", "webchat", "--tenant", "acme", "--qor", "aria", "--key", "wc_browser", "--secret", "wc-secret")
Identity.objects.create(tenant=Tenant.objects.get(slug="acme"), channel="telegram", external_id="42",
                        user=get_user_model().objects.get(username="alice"), display_name="Alice",
                        approval="approved", trust_level="owner")
"""


SERVER_ENV: dict[str, dict[str, str]] = {}  # base URL -> the environment its server runs with



def _server_env(database: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(DATABASE_URL=f"sqlite:///{database}", DJANGO_SECRET_KEY="browser-test",
               CELERY_BROKER_URL="",  # turns run inside the server, as on the embedded default
               QORVEN_LOG_LEVEL="WARNING")
    if env.get("REDIS_URL"):
        # The Redis the tests were given (under pytest-xdist its worker's own database:
        # tests/isolated_env.py), under key prefixes of this server's own: its database
        # (a copy) hands out the ids the test process's does, and a database shared by
        # every run's servers (it was 9) was flushed and swept by the tests of a run on it.
        server = uuid.uuid4().hex[:8]
        env["QORVEN_LIVE_PREFIX"] = f"asgi-browser-{server}"
        env["QORVEN_CACHE_PREFIX"] = f"qorven-browser-{server}"
    return env


@pytest.fixture(scope="session")
def browser_database(tmp_path_factory) -> Path:
    """A migrated database with acme, alice and the bindings, made once per run; each
    test's server gets a copy of its own."""
    database = tmp_path_factory.mktemp("browser") / "template.sqlite3"
    qorven = str(Path(sys.executable).with_name("qorven"))
    subprocess.run([qorven, "shell", "-c", SETUP.format(password=PASSWORD)], cwd=ROOT, env=_server_env(database),
                   check=True, capture_output=True, timeout=180)
    return database


def _chromium_required() -> None:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it with apt")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    pytest.importorskip("playwright")


@pytest.fixture(scope="module")
def _chromium():
    """One chromium for the tests of a module that a process runs in a row: launching one
    (and Playwright's driver) took a second or more a test. Not one for the whole process:
    while Playwright's sync API is open it marks its event loop as running on the thread,
    and the tests of other modules run there (asyncio.run, Django's async-unsafe checks)."""
    _chromium_required()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browser(_chromium):
    """The module's chromium for one test, which opens what it needs in new contexts
    (cookies, storage and permissions are a context's own); whatever it opened is closed
    after it, so the next test starts from none."""
    yield _chromium
    for context in _chromium.contexts:
        context.close()


@pytest.fixture
def chat_server(tmp_path, request):
    """The server, its model server and its platform server; settings of the server's own
    may be given as the fixture's parameter (indirect parametrization)."""
    _chromium_required()
    database = tmp_path / "browser.sqlite3"
    shutil.copyfile(request.getfixturevalue("browser_database"), database)
    model, platform = ModelServer().start(), PlatformServer()
    port = free_port()
    env = _server_env(database)
    env.update(OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="k", QORVEN_MODEL="scripted-model",
               TELEGRAM_API_BASE=platform.url + "/telegram", **getattr(request, "param", {}))
    qorven = str(Path(sys.executable).with_name("qorven"))
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen([qorven, "serve", "--no-migrate", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(base + "/accounts/login/", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("the server did not start:\n" + (tmp_path / "server.log").read_text())
                time.sleep(0.3)
        SERVER_ENV[base] = env
        yield base, model, platform
    finally:
        SERVER_ENV.pop(base, None)
        # Killed outright: no test here is about the server's stop, and a stop lets the
        # tasks running finish (a reply still streaming kept it 10 s) on a database that is
        # thrown away; its Redis keys are under prefixes of its own.
        proc.kill()
        proc.wait(10)
        log.close()
        model.stop()
        platform.stop()


def post_telegram(base: str, text: str, message_id: int, **sender) -> int:
    """A Telegram update from alice's paired account (42), or from `sender` (user_id=…)."""
    request = urllib.request.Request(
        base + "/v1/webhooks/telegram",
        data=json.dumps(telegram_update(text, message_id=message_id, **sender)).encode(),
        headers={"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": "tg-secret"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def sign_in(browser, base: str, *, context=None):
    """A page on alice's chat with Aria, signed in and live (in a new browser context, or
    in `context`; more tabs of it: page.context.new_page())."""
    from playwright.sync_api import expect

    page = (context or browser.new_context(viewport={"width": 1280, "height": 820})).new_page()
    page.set_default_timeout(20_000)
    page.goto(base + "/chat/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/chat/aria/")
    expect(page.locator("[data-status]")).to_have_attribute("data-state", "live")
    return page


def console_errors(context) -> list[str]:
    """What the pages of `context` log as errors from now on (console.error, a script's
    uncaught exception, a refused resource), filled as they come."""
    errors: list[str] = []
    context.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    context.on("weberror", lambda error: errors.append(str(error.error)))
    return errors


def send(page, text: str) -> None:
    composer = page.locator("[data-input]")
    composer.fill(text)
    composer.press("Enter")


NOT_ANSWERED = "Not answered (the notice below says why)"
SERVER_WORK = 20_000  # ms an assertion waits for a turn or a delivery to finish


