"""The suite runs on its own settings: no `.env`, none of the developer's model, platform
or Qorven variables (tests/isolated_env.py, loaded before Django), so a real key in a
developer's `.env` or shell is never used by `make test`."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests import isolated_env

ROOT = Path(__file__).resolve().parent.parent


def test_the_suite_reads_no_env_file_and_scrubs_the_developers_settings():
    assert settings.ENV_FILE == "" and os.environ["QORVEN_ENV_FILE"] == ""
    environ = {"OPENAI_API_KEY": "sk-real", "OPENAI_BASE_URL": "https://api.example/v1",
               "QORVEN_MODEL": "paid-model", "TELEGRAM_API_BASE": "https://api.telegram.example",
               "DJANGO_DEBUG": "1", "DATABASE_URL": "sqlite:///kept.sqlite3", "HOME": "/root"}
    isolated_env._scrub(environ)
    assert environ.keys() & {"OPENAI_API_KEY", "OPENAI_BASE_URL", "QORVEN_MODEL", "TELEGRAM_API_BASE",
                             "DJANGO_DEBUG"} == set()
    assert environ["DATABASE_URL"] == "sqlite:///kept.sqlite3" and environ["HOME"] == "/root"
    assert environ["QORVEN_ENV_FILE"] == ""
    # Redis keys of this run's own: an earlier run's live groups and cache counters are not read.
    run = os.environ["QORVEN_CACHE_PREFIX"].removeprefix("qorven-test-")
    assert len(run) == 8 and os.environ["QORVEN_LIVE_PREFIX"] == f"asgi-test-{run}"


def test_the_developers_outbound_proxy_is_not_used_to_reach_the_suites_own_servers():
    """The fake model and platform servers listen on loopback; the host's own clients follow
    HTTP(S)_PROXY, so a developer's proxy got every request to them (and refused them)."""
    names = ("HTTP_PROXY", "https_proxy", "ALL_PROXY", "no_proxy")
    environ = dict.fromkeys(names, "http://proxy.corp.example:3128")
    isolated_env._scrub(environ)
    assert [n for n in names if n in environ] == []


def read_setting(name: str, env: dict[str, str]) -> str:
    code = f"import django; django.setup(); from django.conf import settings; print(settings.{name})"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_env_file_is_read_only_where_one_is_named(tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text("OPENAI_BASE_URL=http://127.0.0.1:9/v1\nQORVEN_MODEL=from-the-file\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "qorven.settings"}
    assert read_setting("QORVEN_MODEL", {**env, "QORVEN_ENV_FILE": str(dotenv)}) == "from-the-file"
    assert read_setting("QORVEN_MODEL", env) == ""  # the suite's processes: QORVEN_ENV_FILE is empty


def test_each_test_worker_process_has_a_redis_database_of_its_own():
    """Under pytest-xdist, worker gwN adds N to the run's Redis database number, so one
    worker's Celery queues, cache and live groups are never another's."""
    for worker, url, expected in [
        ("gw0", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("gw2", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/2"),
        ("gw1", "redis://:secret@cache.internal:6380/4", "redis://:secret@cache.internal:6380/5"),
        ("gw2", "redis://127.0.0.1:6379", "redis://127.0.0.1:6379/2"),
        ("gw1", "redis://127.0.0.1:6379/3?health_check_interval=5", "redis://127.0.0.1:6379/4?health_check_interval=5"),
        ("", "redis://127.0.0.1:6379/3", "redis://127.0.0.1:6379/3"),  # not under xdist: as given
    ]:
        environ = {"PYTEST_XDIST_WORKER": worker, "REDIS_URL": url}
        isolated_env._redis_of_this_worker(environ)
        assert environ["REDIS_URL"] == expected, (worker, url)


@pytest.mark.skipif(not settings.REDIS_URL, reason="the cache is this process's own memory without REDIS_URL")
def test_what_a_test_clears_before_it_runs_is_its_own_runs_keys_only():
    """Another run (or a browser test's server) on the same Redis database keeps its send
    gates and marks while this run's tests clear theirs."""
    import redis
    from django.core.cache import cache

    from tests.conftest import _gates_clear

    client = redis.from_url(settings.REDIS_URL)
    theirs = ["qorven-browser-0a1b2c3d:1:send:binding:1", "qorven-other:1:qorven:inbound-pruned"]
    for key in theirs:
        client.set(key, 1, ex=60)
    cache.set("send:binding:1", 1, 60)
    try:
        _gates_clear()
        assert cache.get("send:binding:1") is None
        assert [client.get(key) for key in theirs] == [b"1", b"1"]
    finally:
        client.delete(*theirs)
