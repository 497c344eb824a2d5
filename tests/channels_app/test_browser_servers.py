"""The browser tests' server works on the Redis the tests were given (under pytest-xdist,
its worker's own database: tests/isolated_env.py), under keys of its own, so two runs (or
two workers) at once never read or clear each other's live groups, stream text or gates."""
from __future__ import annotations

import os

from .browser_support import _server_env


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

