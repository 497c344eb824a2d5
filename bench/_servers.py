"""What the benchmarks that start real server processes share: the fakes (an
OpenAI-compatible model server, a Telegram Bot API), starting and stopping process groups,
a Django helper process driven over stdin/stdout, the layouts' processes (``qorven serve``,
plus ``qorven worker`` on PostgreSQL + Redis), the environment they get, and percentiles.

Not a benchmark itself: bench/run.py skips files starting with ``_``. Used by
bench/isolation.py and bench/e2e.py.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _common import ROOT, log, recreate_postgres

QORVEN = Path(sys.executable).with_name("qorven")
# Environment the server processes must not inherit from the caller's shell.
SCRUBBED = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "TELEGRAM_API_BASE", "DJANGO_SETTINGS_MODULE")
SCRUBBED_PREFIXES = ("QORVEN_", "OPENAI_")
PROFILE_DIR = ""  # set by a benchmark's --profile: where py-spy writes each process's samples
PY_SPY = Path(sys.executable).with_name("py-spy")  # not a dependency: `pip install py-spy` to profile


# --- the fakes: a model server and a Telegram API ---------------------------------------------


class FakeModel:
    """OpenAI-compatible chat completions (SSE when asked to stream). The reply repeats the
    last user message, so a reply can be matched to the message it answers.

    With `slow` on, a request whose messages mention `slow_marker` waits `slow_seconds`
    first. With `tag` (a pattern with one group), the time each request took here is kept
    in `handled_ms` under the group's match in the last user message: what the model itself
    cost the turn that sent it, and in `prompt_messages` how many messages it carried."""

    def __init__(self, *, slow_marker: str = "", slow_seconds: float = 0.0, tag: re.Pattern[str] | None = None) -> None:
        self.slow = False
        self.slowed = 0
        self.requests = 0
        self.handled_ms: dict[str, float] = {}
        self.prompt_messages: dict[str, int] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # As real servers do: a response's writes leave at once (not after the client's
            # delayed ACK of the headers, ~40 ms on a connection kept open).
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                started = time.perf_counter()
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, "application/json", b'{"error": {"message": "not found"}}')
                fake.requests += 1
                messages = body.get("messages") or []
                if fake.slow and slow_marker and slow_marker in json.dumps(messages):
                    fake.slowed += 1
                    time.sleep(slow_seconds)
                users = [m for m in messages if m.get("role") == "user"]
                last = users[-1].get("content") if users else ""
                last = last if isinstance(last, str) else json.dumps(last)
                text = "re: " + last[-300:]
                try:
                    if body.get("stream"):
                        self._stream(body, text)
                    else:
                        self._completion(body, text)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the caller gave up (its process was stopped): nobody to answer
                found = tag.search(last) if tag is not None else None
                if found and found.group(1) not in fake.handled_ms:
                    fake.handled_ms[found.group(1)] = (time.perf_counter() - started) * 1000
                    fake.prompt_messages[found.group(1)] = len(messages)

            def _completion(self, body: dict[str, Any], text: str) -> None:
                payload = {"id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
                           "model": body.get("model", "bench"),
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
                self._send(200, "application/json", json.dumps(payload).encode())

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict[str, Any], text: str) -> None:
                def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
                    return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": int(time.time()),
                            "model": body.get("model", "bench"),
                            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

                chunks = [chunk({"role": "assistant", "content": ""})]
                chunks += [chunk({"content": text[i:i + 40]}) for i in range(0, len(text), 40)]
                chunks.append(chunk({}, "stop"))
                if (body.get("stream_options") or {}).get("include_usage"):
                    chunks.append({**chunk({}), "choices": [],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
                # As OpenAI streams: a chunked body, the connection kept for the next request.
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                events = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
                events += b"data: [DONE]\n\n"
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events))
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, name="fake-model", daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FakeTelegram:
    """A Telegram Bot API answering every call (sendMessage, …) with ok, on connections kept
    open as Telegram's are. While `hang` is set (start_hanging), it reads each request and
    never answers (the connection stays open until `release`). With `tag` (a pattern with
    one group), the time a sent text matching it arrived is kept in `sent_at` under the
    group's match (time.perf_counter)."""

    def __init__(self, *, tag: re.Pattern[str] | None = None) -> None:
        self.hang = False
        self.hung = 0
        self.calls = 0
        self.sent_at: dict[str, float] = {}
        self.released = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # As real servers do: a response's writes leave at once (not after the client's
            # delayed ACK of the headers, ~40 ms on a connection kept open).
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                arrived = time.perf_counter()
                fake.calls += 1
                found = tag.search(body.decode("utf-8", "replace")) if tag is not None else None
                if found and found.group(1) not in fake.sent_at:
                    fake.sent_at[found.group(1)] = arrived
                if fake.hang:
                    fake.hung += 1
                    fake.released.wait()
                    self.close_connection = True
                    return  # closed without an answer
                data = b'{"ok": true, "result": {"message_id": 1}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128  # every send finds the door open

        self.httpd = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, name="fake-telegram", daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start_hanging(self) -> None:
        self.released.clear()
        self.hang = True

    def release(self) -> None:
        """Answer from now on (so leftovers resent later go through) and drop the hung calls."""
        self.hang = False
        self.released.set()

    def stop(self) -> None:
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()


# --- processes: every one started here is killed at the end ----------------------------------

_started: list[subprocess.Popen] = []


def spawn(cmd: list[str], env: dict[str, str], log_path: Path, *, pipes: bool = False) -> subprocess.Popen:
    """Start a process in a session of its own (its children share its process group),
    its output appended to `log_path`; with `pipes`, stdin and stdout are pipes to us."""
    with open(log_path, "ab") as out:  # the child keeps its own copy
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, start_new_session=True, stderr=out,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL, stdout=subprocess.PIPE if pipes else out,
            text=pipes,
        )
    _started.append(proc)
    return proc


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(*procs: subprocess.Popen, grace: float = 1.5) -> None:
    """SIGTERM each process's group (the process and its children, e.g. Celery's pool) at
    once, then SIGKILL the groups after `grace` seconds (at once if the leader is gone,
    for children it left behind)."""
    if PROFILE_DIR:  # py-spy writes its samples on an interrupt, not on SIGTERM
        grace = max(grace, 10.0)
    for proc in procs:
        if proc in _started:
            _started.remove(proc)
        _signal_group(proc, signal.SIGINT if PROFILE_DIR else signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            log(f"process {proc.pid} did not die")


def stop_all() -> None:
    stop(*_started, grace=1.0)


def _on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that clean up


def kill_on_exit() -> None:
    """Turn SIGTERM, SIGINT and SIGHUP into SystemExit (so `finally` blocks clean up) and
    stop every process started here when the interpreter exits."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    atexit.register(stop_all)


def profiled(name: str, cmd: list[str]) -> list[str]:
    """`cmd`, run under py-spy (sampling, all threads, children too) when PROFILE_DIR is
    set: PROFILE_DIR/NAME.txt gets collapsed stacks, for flame graphs or a grep."""
    if not PROFILE_DIR:
        return cmd
    out = Path(PROFILE_DIR) / f"{name}.txt"
    return [str(PY_SPY), "record", "--format", "raw", "--subprocesses",
            "--rate", "200", "--output", str(out), "--", *cmd]


def cpu_seconds(proc: subprocess.Popen) -> float:
    """CPU time (user + system) used so far by the live processes of `proc`'s group (the
    process and, e.g., Celery's pool children); 0 where /proc cannot tell."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == proc.pid:  # fields[2]: the process group
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def free_port() -> int:
    """Below the kernel's ephemeral range, where the benchmark's own client connections get
    their ports (tests/ports.py)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.ports import free_port as below_ephemeral

    return below_ephemeral()


def wait_http(url: str, procs: list[subprocess.Popen], timeout: float, what: str) -> None:
    """Until `url` answers 200; RuntimeError if one of `procs` dies or `timeout` passes."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start (see the log tail)")
        time.sleep(0.2)


# --- the database helper: one Django process per layout, commands on stdin --------------------


def helper_loop(commands: dict[str, Callable[..., Any]]) -> int:
    """The child's side, Django set up: one JSON object per stdin line ({"do": name,
    "args": {...}}), one JSON answer per stdout line. Whatever else prints goes to stderr."""
    from django.db import connection

    answers, sys.stdout = sys.stdout, sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            answer = {"ok": True, "result": commands[request["do"]](**request.get("args", {}))}
        except Exception as exc:  # reported to the parent, which decides
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            connection.close()  # hold nothing (SQLite locks, PostgreSQL sessions) between commands
        print(json.dumps(answer, default=str), file=answers, flush=True)
    return 0


def django_setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qorven.settings")
    import django

    django.setup()


class Helper:
    """The parent's side: `script --helper` started with the servers' environment."""

    def __init__(self, script: str, env: dict[str, str], log_path: Path) -> None:
        self.proc = spawn([sys.executable, str(Path(script).resolve()), "--helper"], env, log_path, pipes=True)
        self.lock = threading.Lock()  # one command at a time (callers may be threads)

    def __call__(self, command: str, timeout: float = 300.0, **args: Any) -> Any:
        with self.lock:
            assert self.proc.stdin and self.proc.stdout
            self.proc.stdin.write(json.dumps({"do": command, "args": args}) + "\n")
            self.proc.stdin.flush()
            answer: list[str] = []
            reader = threading.Thread(target=lambda: answer.append(self.proc.stdout.readline()), daemon=True)
            reader.start()
            reader.join(timeout)
        if not answer or not answer[0]:
            raise RuntimeError(f"the database helper gave no answer to {command!r} (exit {self.proc.poll()})")
        reply = json.loads(answer[0])
        if not reply["ok"]:
            raise RuntimeError(f"database helper, {command}: {reply['error']}")
        return reply["result"]

    def close(self) -> None:
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        stop(self.proc)


# --- a layout's server processes ----------------------------------------------------------------


class Servers:
    """`qorven serve` (and, with `worker`, `qorven worker --concurrency 4`) on a free port,
    with the layout's environment; logs in `tmp`."""

    def __init__(self, name: str, env: dict[str, str], tmp: Path, worker: bool, redis_url: str | None) -> None:
        self.name, self.env, self.tmp, self.worker, self.redis_url = name, env, tmp, worker, redis_url
        self.procs: list[subprocess.Popen] = []
        self.base = ""

    def start(self, label: str) -> None:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        logs = self.tmp / f"{self.name}-{label}"
        serve = [str(QORVEN), "serve", "--no-migrate", "--port", str(port)]
        self.procs = [spawn(profiled(f"{self.name}-{label}-serve", serve), self.env, Path(f"{logs}-serve.log"))]
        if self.worker:
            worker = [str(QORVEN), "worker", "--concurrency", "4", "--loglevel", "WARNING"]
            self.procs.append(spawn(profiled(f"{self.name}-{label}-worker", worker), self.env,
                                    Path(f"{logs}-worker.log")))
        wait_http(self.base + "/accounts/login/", self.procs, 60, f"{self.name}: the server")

    def stop(self) -> None:
        stop(*self.procs)
        self.procs = []
        if self.redis_url:  # queued and unacknowledged tasks of the stopped processes go too
            import redis

            redis.from_url(self.redis_url).flushdb()

    def log_tail(self, chars: int = 3000) -> str:
        logs = sorted(self.tmp.glob(f"{self.name}-*.log"), key=lambda p: p.stat().st_mtime)
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in logs[-2:])


# --- the parent's environment and databases ----------------------------------------------------


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith(SCRUBBED_PREFIXES)}
    env.update({"DJANGO_SECRET_KEY": "bench-not-a-secret", "DJANGO_DEBUG": "0", "QORVEN_LOG_LEVEL": "WARNING",
                "PYTHONUNBUFFERED": "1"})
    return env


def unreachable(pg_url: str, redis_url: str) -> str | None:
    """Why the PostgreSQL + Redis layout cannot run (None if it can); creates the database."""
    try:
        import redis

        redis.from_url(redis_url, socket_connect_timeout=2).ping()
    except Exception as exc:
        return f"Redis at {redis_url} unreachable ({type(exc).__name__}: {exc})"
    why = recreate_postgres(pg_url)
    return f"PostgreSQL at {pg_url} unreachable ({why})" if why else None


def drop_postgres(url: str) -> None:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    dbname = str(conninfo_to_dict(url).get("dbname"))
    try:
        with psycopg.connect(make_conninfo(url, dbname="postgres", connect_timeout=3), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
    except psycopg.OperationalError as exc:
        log(f"could not drop {dbname}: {exc}")


def flush_redis(url: str) -> None:
    try:
        import redis

        redis.from_url(url, socket_connect_timeout=2).flushdb()
    except Exception as exc:
        log(f"could not flush {url}: {exc}")


# --- figures ----------------------------------------------------------------------------------


def stamp(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def pct(values: list[float], digits: int = 1) -> tuple[float, float]:
    """(p50, p99), the p99 interpolated between observed values, never beyond the largest
    (statistics' default method extrapolates past it on small samples)."""
    if len(values) == 1:
        return round(values[0], digits), round(values[0], digits)
    p99 = statistics.quantiles(values, n=100, method="inclusive")[98]
    return round(statistics.median(values), digits), round(p99, digits)
