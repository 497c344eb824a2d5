"""The documented production settings pass `check --deploy` with no warning, and the
embedded default's plain-HTTP settings are what it reports (so the check is real)."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION = {  # the README's production example
    "DATABASE_URL": "postgres://qorven@db.internal:5432/qorven",
    "REDIS_URL": "redis://redis.internal:6379/0",
    "QORVEN_PUBLIC_URL": "https://qorven.example.com",
    "DJANGO_ALLOWED_HOSTS": "qorven.example.com",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO",
    "QORVEN_CLIENT_IP_HEADER": "HTTP_X_FORWARDED_FOR",
    "DJANGO_SECURE_HSTS_PRELOAD": "true",
}


def check_deploy(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "QORVEN_", "DATABASE_URL", "REDIS_URL", "CELERY_"))}
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                          cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=120)


def test_the_documented_production_settings_pass_check_deploy():
    done = check_deploy(**PRODUCTION, DJANGO_SECRET_KEY=secrets.token_urlsafe(50))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


def test_without_https_check_deploy_reports_what_is_missing():
    plain = {**PRODUCTION, "QORVEN_PUBLIC_URL": "http://qorven.example.com"}
    plain.pop("DJANGO_SECURE_HSTS_PRELOAD")
    done = check_deploy(**plain, DJANGO_SECRET_KEY=secrets.token_urlsafe(50))
    assert done.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in done.stderr + done.stdout
