"""`qorven serve` on a fresh SQLite file serves the admin login page, static files and
WebSockets, on either ASGI server, and stops cleanly on SIGTERM."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from .processes import free_port

ROOT = Path(__file__).resolve().parents[1]



@pytest.mark.parametrize("server", ["uvicorn", "daphne"])
def test_serve_migrates_a_fresh_database_and_serves_the_admin_login(tmp_path, server):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    env["DJANGO_SECRET_KEY"] = "serve-test-key"
    env["PYTHONPROFILEIMPORTTIME"] = "1"  # which modules it imports, on stderr
    qorven = Path(sys.executable).with_name("qorven")
    log = open(tmp_path / "serve.log", "w+")  # not a pipe: nobody reads it while the server runs
    proc = subprocess.Popen(
        [str(qorven), "serve", "--port", str(port), "--server", server],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 240  # a fresh database is migrated first: minutes on a loaded machine
        page = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=2) as response:
                    page = response.read().decode()
                    css = urllib.request.urlopen(f"http://127.0.0.1:{port}/static/admin/css/base.css", timeout=2)
                    assert css.status == 200
                    static_served(port)
                    break
            except OSError:
                time.sleep(0.3)
        assert page is not None, f"server did not answer; exit={proc.poll()}"
        assert "Log in" in page and 'name="password"' in page
        # WebSockets are served, and one from another site's page is refused.
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws://127.0.0.1:{port}/ws/chat/acme/aria/", origin="https://elsewhere.example", open_timeout=10)
        assert refused.value.response.status_code == 403
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=40)
        log.seek(0)
        out = log.read()
        assert proc.returncode == 0, out[-5000:]
        assert "Finishing the tasks running" in out  # the embedded worker's running tasks finish first
        # Which database it serves, said as it starts (a relative DATABASE_URL or a service
        # manager's folder made it another file than meant, unseen).
        assert f"Database: SQLite file {tmp_path / 'fresh.sqlite3'}" in out
        # The beat queues no new run once shutdown begins: before the tasks are waited for
        # (it went on after that line), and under uvicorn at the signal, before the sockets close.
        stopped = out.index("embedded beat scheduler stopped")
        assert stopped < out.index("Finishing the tasks running")
        if server == "uvicorn":
            assert stopped < out.index("Shutting down")
        # The model SDK was loaded as it started, though no model was called: no turn waits for it.
        imported = {line.rpartition("|")[2].strip() for line in out.splitlines() if line.startswith("import time:")}
        assert "openai" in imported and "channels_app.consumers" in imported
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def static_served(port: int) -> None:
    """The chat page's script as a browser gets it with DEBUG off: never sniffed as
    another type, and checked again on every page load (304 while unchanged), so a
    browser does not run the previous version's script against an upgraded server."""
    url = f"http://127.0.0.1:{port}/static/qorven/chat.js"
    with urllib.request.urlopen(url, timeout=5) as script:
        assert script.status == 200 and script.headers["Content-Type"].startswith("text/javascript")
        assert script.headers["X-Content-Type-Options"] == "nosniff"
        assert "no-cache" in script.headers["Cache-Control"]
        modified = script.headers["Last-Modified"]
    with pytest.raises(urllib.error.HTTPError) as unchanged:
        urllib.request.urlopen(urllib.request.Request(url, headers={"If-Modified-Since": modified}), timeout=5)
    assert unchanged.value.code == 304



def test_serve_on_a_port_already_taken_says_so_before_starting_anything(tmp_path):
    """A second `make run` printed "Qorven on http://127.0.0.1:8000/" (the first server's
    address), migrated, started its own worker and beat on the same database, and only then
    failed in a log line of uvicorn's ("address already in use"), exit 3."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    env["DJANGO_SECRET_KEY"] = "serve-test-key"
    try:
        done = subprocess.run([str(Path(sys.executable).with_name("qorven")), "serve", "--port", str(port)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    finally:
        taken.close()
    assert done.returncode == 1, done.stdout[-800:] + done.stderr[-800:]
    assert f"127.0.0.1:{port} is taken" in done.stderr and "Traceback" not in done.stderr
    assert "Qorven on" not in done.stdout and not (tmp_path / "fresh.sqlite3").exists()  # nothing was started
    done = subprocess.run([str(Path(sys.executable).with_name("qorven")), "serve", "--host", "no such host."],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 1 and "--host no such host.: not an address" in done.stderr, done.stderr[-800:]
