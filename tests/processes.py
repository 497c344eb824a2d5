"""Real Qorven processes (`qorven worker`, `qorven beat`) against the test database and
Redis, for the tests that need the scale-out layout's own behaviour (CI's PostgreSQL +
Redis pass). Each runs in a process group of its own, so a test can kill it outright."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from .ports import free_port

ROOT = Path(__file__).resolve().parents[1]
QORVEN = str(Path(sys.executable).with_name("qorven"))

needs_postgres_and_redis = pytest.mark.skipif(
    not django_settings.REDIS_URL or connection.vendor != "postgresql",
    reason="needs PostgreSQL and a Redis broker (DATABASE_URL and REDIS_URL, as in CI's second pass)",
)


def process_env(model_server=None, **extra: str) -> dict[str, str]:
    """The environment of a process working on this test run's database and broker."""
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": django_settings.REDIS_URL,
        "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,
    }
    env.pop("CELERY_BROKER_URL", None)
    if model_server is not None:
        env.update(OPENAI_BASE_URL=model_server.base_url, OPENAI_API_KEY="test-key", QORVEN_MODEL="scripted-model")
    for name in ("TELEGRAM_API_BASE", "WHATSAPP_API_BASE", "SLACK_API_BASE", "DISCORD_API_BASE", "TWILIO_API_BASE"):
        env[name] = str(getattr(django_settings, name))
    env.update(extra)
    return env


WORKER_READY = " ready."  # what `qorven worker` prints once it consumes


_STARTED: list[subprocess.Popen] = []  # every Process of this test process, for processes_left_kill


def processes_left_kill() -> list[list[str]]:
    """SIGKILL to the process groups a test started and left running (its clean-up failed
    before it stopped them); run as the test process ends. Left, a server, a worker and a
    beat of one run kept connections to its test database, whose name the next run's
    worker then could not make again. Returns their command lines."""
    left = [popen for popen in _STARTED if popen.poll() is None]
    for popen in left:
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        popen.wait(10)
    _STARTED.clear()
    return [list(map(str, popen.args)) for popen in left]  # type: ignore[arg-type]


class Process:
    """A running `qorven …` and the lines it printed so far."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args = args
        self.popen = subprocess.Popen([QORVEN, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, start_new_session=True)
        _STARTED.append(self.popen)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_line(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in list(self.lines)):
            assert self.popen.poll() is None, f"{self.args} exited:\n{self.output}"
            assert time.monotonic() < deadline, f"{self.args} never printed {text!r}:\n{self.output}"
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL to the whole process group: no warm shutdown, no requeue by prefork."""
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)


class Processes:
    def __init__(self) -> None:
        self.procs: list[Process] = []

    def start(self, *args: str, env: dict[str, str]) -> Process:
        proc = Process(list(args), env)
        self.procs.append(proc)
        return proc

    def worker(self, env: dict[str, str], *, concurrency: int = 2, wait: bool = True) -> Process:
        """`qorven worker`, once it consumes; not `wait`, at once (what else the test
        starts starts meanwhile): then `wait_for_line(WORKER_READY)` before relying on it."""
        # At INFO whatever QORVEN_LOG_LEVEL the test gives its processes: Celery's " ready."
        # is an INFO line.
        proc = self.start("worker", "--concurrency", str(concurrency), "--loglevel", "INFO", env=env)
        if wait:
            proc.wait_for_line(WORKER_READY)
        return proc

    def purge(self, env: dict[str, str]) -> None:
        """Empty the broker's queues (a task left by an earlier run must not run here): what
        `celery -A qorven purge -f` does, from this process, which has the app loaded
        already (a process of its own spent a second or more starting, for each test)."""
        from kombu import Connection

        from qorven.celery import app

        with Connection(env.get("CELERY_BROKER_URL") or env["REDIS_URL"]) as broker:
            app.control.purge(connection=broker)

    def alive(self) -> None:
        for proc in self.procs:
            if proc.popen.returncode is None:
                assert proc.popen.poll() is None, f"{proc.args} exited:\n{proc.output}"

    def stop(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            try:
                proc.popen.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(5)


@pytest.fixture
def processes():
    running = Processes()
    yield running
    running.stop()


def wait_for(predicate, timeout: float, *, processes: Processes | None = None, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if processes is not None:
            processes.alive()
        time.sleep(step)
    return False


def redis_of_our_own() -> tuple[int, subprocess.Popen]:
    """A Redis server of the test's own on a free port: the port and its process."""
    port = free_port()
    return port, redis_start(port)


def redis_start(port: int) -> subprocess.Popen:
    """A Redis server of the test's own on `port`, keeping nothing on disk (so a restart
    starts empty, as a Redis that lost its data)."""
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_for(lambda: subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                                           text=True).stdout.strip() == "PONG", 10)
    return proc


# The cache's connection pool, as the settings' CACHES name it on the scale-out layout.
CACHE_POOL = "qorven.runtime.redis_rest.RestingPool"


@pytest.fixture
def cache_redis(settings):
    """The cache (and REDIS_URL) on a Redis of the test's own, keeping nothing on disk:
    (stop, start), to take it away and bring it back empty, as a Redis that lost its data."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    box = {"proc": redis_start(port)}
    settings.REDIS_URL = url
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url,
                                   "KEY_PREFIX": "cache-away", "OPTIONS": {"pool_class": CACHE_POOL}}}

    def stop() -> None:
        box["proc"].terminate()
        box["proc"].wait(10)

    def start() -> None:
        box["proc"] = redis_start(port)

    yield stop, start
    stop()


class HungRedis:
    """A Redis server of the test's own that can be made to hang as a paused machine does:
    stopped (SIGSTOP), its connections are still taken and what is sent to it acknowledged
    by the system, and nothing is answered until it goes on (SIGCONT)."""

    TIMEOUT = 0.5  # QORVEN_REDIS_TIMEOUT while it is used

    def __init__(self) -> None:
        self.port, self.proc = redis_of_our_own()
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def hang(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def answer(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.answer()
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def hung_redis(settings):
    """The cache and REDIS_URL on a Redis of the test's own (`HungRedis`), with the client
    timeouts the settings give it (QORVEN_REDIS_TIMEOUT) kept small."""
    server = HungRedis()
    settings.REDIS_URL = server.url
    settings.QORVEN_REDIS_TIMEOUT = server.TIMEOUT
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": server.url,
                                   "KEY_PREFIX": "redis-hung",
                                   "OPTIONS": {"socket_timeout": server.TIMEOUT,
                                               "socket_connect_timeout": server.TIMEOUT,
                                               "pool_class": CACHE_POOL}}}
    yield server
    server.stop()


@pytest.fixture
def black_hole():
    """The port of a listener that never takes a connection: its backlog is full, so
    connecting to it waits, as to a host whose packets are dropped."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filling = []
    for _ in range(3):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        filling.append(sock)
    yield port
    for sock in filling:
        sock.close()
    listener.close()
