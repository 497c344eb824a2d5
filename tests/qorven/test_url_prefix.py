"""The settings of Qorven under a path (QORVEN_URL_PREFIX, or the path of
QORVEN_PUBLIC_URL), as a `qorven` process reads them from its environment."""
from __future__ import annotations

import json

from .test_cli import configuration_error, run

SHOW = ("import json; from django.conf import settings as s; from django.urls import reverse; "
        "print(json.dumps({n: getattr(s, n) for n in ('QORVEN_URL_PREFIX', 'QORVEN_PUBLIC_URL', 'FORCE_SCRIPT_NAME', "
        "'STATIC_URL', 'SESSION_COOKIE_PATH', 'CSRF_COOKIE_PATH')} | {'chat': reverse('chat-index')}))")


def settings_with(**env: str) -> dict:
    done = run("shell", "-c", SHOW, DJANGO_SECRET_KEY="cli-test", **env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_without_a_prefix_qorven_is_at_the_hosts_root():
    assert settings_with() == {
        "QORVEN_URL_PREFIX": "", "QORVEN_PUBLIC_URL": "http://127.0.0.1:8000", "FORCE_SCRIPT_NAME": None,
        "STATIC_URL": "/static/", "SESSION_COOKIE_PATH": "/", "CSRF_COOKIE_PATH": "/", "chat": "/chat/"}
    assert settings_with(QORVEN_PUBLIC_URL="https://chat.example.org/")["QORVEN_PUBLIC_URL"] == \
        "https://chat.example.org"


def test_a_prefix_moves_every_address_under_it():
    under = {"QORVEN_URL_PREFIX": "/qorven", "FORCE_SCRIPT_NAME": "/qorven", "STATIC_URL": "/qorven/static/",
             "SESSION_COOKIE_PATH": "/qorven/", "CSRF_COOKIE_PATH": "/qorven/", "chat": "/qorven/chat/"}
    assert settings_with(QORVEN_URL_PREFIX="/qorven") == {**under, "QORVEN_PUBLIC_URL": "http://127.0.0.1:8000/qorven"}
    # The public address's path is the prefix, given there or in both places alike.
    for env in ({"QORVEN_PUBLIC_URL": "https://example.org/qorven/"},
                {"QORVEN_PUBLIC_URL": "https://example.org/qorven", "QORVEN_URL_PREFIX": "qorven/"},
                {"QORVEN_PUBLIC_URL": "https://example.org", "QORVEN_URL_PREFIX": "/qorven/"}):
        assert settings_with(**env) == {**under, "QORVEN_PUBLIC_URL": "https://example.org/qorven"}, env
    deeper = settings_with(QORVEN_URL_PREFIX="/apps/qorven")
    assert (deeper["chat"], deeper["STATIC_URL"]) == ("/apps/qorven/chat/", "/apps/qorven/static/")


def test_a_prefix_that_is_no_plain_path_or_is_one_of_qorvens_own_is_one_line_naming_it():
    for prefix in ("/a b", "/qorven?x=1", "/../etc", "https://example.org/qorven", "/chat", "/v1/x", "/static"):
        line = configuration_error(run("check", DJANGO_SECRET_KEY="cli-test", QORVEN_URL_PREFIX=prefix))
        assert "QORVEN_URL_PREFIX" in line and repr(prefix) in line, line
    line = configuration_error(run("check", DJANGO_SECRET_KEY="cli-test", QORVEN_URL_PREFIX="/assistant",
                                   QORVEN_PUBLIC_URL="https://example.org/qorven"))
    assert "two different paths" in line, line
