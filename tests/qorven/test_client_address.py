"""Behind a reverse proxy, a client is counted (sign-in and webchat limits) and logged by
the address the proxy forwards, never by one it chose itself: `qorven serve` on an SQLite
file of its own, asked over real HTTP the way a proxy on the same machine asks it."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ..processes import free_port

ROOT = Path(__file__).resolve().parents[2]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "QORVEN_", "DATABASE_URL", "REDIS_URL", "CELERY_"))}


class Server:
    """`qorven serve` (migrating first, as it does by default) on a copy of `template`, the
    `migrated_sqlite` file."""

    def __init__(self, tmp: Path, template: Path, **env: str) -> None:
        self.port = free_port()
        database = tmp / "db.sqlite3"
        shutil.copyfile(template, database)
        self.log = open(tmp / "serve.log", "w+")  # not a pipe: nobody reads it while the server runs
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("qorven")), "serve", "--port", str(self.port), "--no-beat"],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, text=True,
            env={**_clean_env(), "QORVEN_ENV_FILE": "", "DATABASE_URL": f"sqlite:///{database}",
                 "DJANGO_SECRET_KEY": "client-address-test", **env},
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"server did not answer:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

    def sign_in(self, username: str, **headers: str) -> int:
        """A failed sign-in through the form, with the headers a proxy would add: its status."""
        url = f"http://127.0.0.1:{self.port}/accounts/login/"
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as page:
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)', page.read().decode()).group(1)
            cookie = page.headers["Set-Cookie"].split(";")[0]
        body = f"csrfmiddlewaretoken={token}&username={username}&password=wrong-guess".encode()
        request = urllib.request.Request(url, data=body, headers={**headers, "Cookie": cookie})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as refused:
            return refused.code


@pytest.fixture(scope="module")
def behind_a_proxy(tmp_path_factory, migrated_sqlite):
    """The proxy is on the same machine (loopback, trusted by default) and appends to X-Forwarded-For."""
    server = Server(tmp_path_factory.mktemp("proxied"), migrated_sqlite, QORVEN_CLIENT_IP_HEADER="HTTP_X_FORWARDED_FOR",
                    QORVEN_LOGIN_FAILURES_PER_ADDRESS="3/15m", QORVEN_LOGIN_FAILURES_PER_USER="100/15m")
    yield server
    server.stop()


def test_behind_a_proxy_each_client_is_counted_by_the_address_the_proxy_saw(behind_a_proxy):
    # The client writes an X-Forwarded-For of its own each time; the proxy appends the address it saw.
    for n in range(3):
        forwarded = f"10.0.0.{n}, 203.0.113.9"
        assert behind_a_proxy.sign_in(f"nobody{n}", **{"X-Forwarded-For": forwarded}) == 200  # the form again
    assert behind_a_proxy.sign_in("nobody9", **{"X-Forwarded-For": "10.0.0.99, 203.0.113.9"}) == 429
    # Another client behind the same proxy is not held back by the first one's guesses.
    assert behind_a_proxy.sign_in("someone", **{"X-Forwarded-For": "198.51.100.7"}) == 200
    log = behind_a_proxy.output()
    assert '203.0.113.9:' in log and '"POST /accounts/login/ HTTP/1.1" 429' in log
    assert '198.51.100.7:' in log


def test_a_request_without_the_header_is_counted_by_its_connection(behind_a_proxy):
    # A probe or a request made on the machine itself: no header, no error.
    assert behind_a_proxy.sign_in("nobody-local") == 200
    assert behind_a_proxy.sign_in("nobody-odd", **{"X-Forwarded-For": "not an address"}) == 200


def test_a_client_that_is_not_a_trusted_proxy_cannot_choose_its_address(tmp_path, migrated_sqlite):
    # The server is reached directly (its port exposed): the connection is not from the proxy.
    server = Server(tmp_path, migrated_sqlite, QORVEN_CLIENT_IP_HEADER="HTTP_X_REAL_IP", QORVEN_TRUSTED_PROXIES="192.0.2.1",
                    QORVEN_LOGIN_FAILURES_PER_ADDRESS="3/15m", QORVEN_LOGIN_FAILURES_PER_USER="100/15m")
    try:
        for n in range(3):
            assert server.sign_in(f"nobody{n}", **{"X-Real-IP": f"203.0.113.{n}"}) == 200
        assert server.sign_in("nobody9", **{"X-Real-IP": "203.0.113.99"}) == 429
    finally:
        server.stop()
