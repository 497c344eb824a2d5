"""What the backup tests share: conversations to back up, and a backup read back the way
it is restored."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import uuid
from contextlib import contextmanager

import psycopg
from django.db import connection

from qorven.runtime.backup import _libpq_env
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve


@contextmanager
def restored(path):
    """A cursor on the database the backup restores to: the SQLite copy itself, or a new
    PostgreSQL database pg_restore fills from the dump (dropped after)."""
    if connection.vendor == "sqlite":
        copy = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            yield copy.cursor()
        finally:
            copy.close()
        return
    settings = connection.settings_dict
    name = f"restore_{uuid.uuid4().hex[:10]}"
    admin = psycopg.connect(**_connect(settings, "postgres"), autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        env = {**os.environ, **_libpq_env({**settings, "NAME": name})}
        done = subprocess.run(["pg_restore", "--no-owner", "--exit-on-error", "-d", name, str(path)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        with psycopg.connect(**_connect(settings, name)) as copy:
            yield copy.cursor()
    finally:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.close()


def _connect(settings, name):
    return {k: v for k, v in {"host": settings["HOST"], "port": settings["PORT"], "user": settings["USER"],
                              "password": settings["PASSWORD"], "dbname": name}.items() if v}


def chat(world, user, tenant=None, qor=None, n=3):
    session = session_resolve(tenant=tenant or world.tenant_a, qor=qor or world.qor_a, channel="web", user=user)
    for i in range(n):
        message_append(session=session, role="user", content=f"note {i} from {user.username}", channel="web",
                       notify=False)
    return session
