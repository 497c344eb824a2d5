"""The browser tests' server works on the Redis the tests were given (under pytest-xdist,
its worker's own database: tests/isolated_env.py), under keys of its own, so two runs (or
two workers) at once never read or clear each other's live groups, stream text or gates."""
from __future__ import annotations

import os
import subprocess
import sys

from .browser_support import ROOT, _server_env


def test_a_browser_tests_server_uses_the_runs_redis_database_under_keys_of_its_own(monkeypatch, tmp_path):
    for given in ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/4", "redis://:pw@cache.internal:6380/2?x=1"):
        monkeypatch.setenv("REDIS_URL", given)
        first, second = _server_env(tmp_path / "a.sqlite3"), _server_env(tmp_path / "b.sqlite3")
        assert first["REDIS_URL"] == second["REDIS_URL"] == given
        for name in ("QORVEN_LIVE_PREFIX", "QORVEN_CACHE_PREFIX"):
            assert first[name] != second[name]  # two servers (of two runs, or one after another)
            assert os.environ[name] not in (first[name], second[name])  # nor the test process's own


def test_without_redis_a_browser_tests_server_runs_embedded(monkeypatch, tmp_path):
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert "REDIS_URL" not in _server_env(tmp_path / "a.sqlite3")


def test_a_test_without_the_database_runs_without_a_task_failing_behind_it():
    """The browser tests use no test database (their server has one of its own). The
    test process started its in-process worker for them anyway, and the sweep a worker
    runs as it starts failed on the database pytest-django kept from it: a traceback in
    every browser run's output. Run here as the first test of a process of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         f"{__file__}::test_without_redis_a_browser_tests_server_runs_embedded"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "1 passed" in output, output
    assert "Traceback" not in output and "ERROR" not in output, output
