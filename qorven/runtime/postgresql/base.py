"""Django's PostgreSQL backend, with a look at each pooled connection before it is used.

A restart, a failover or an operator's pg_terminate_backend ends every idle connection
of psycopg's pool (QORVEN_DB_POOL) at once. The server says so on each (an error
message, then the socket closed), and nothing reads it until the connection is lent and
its first query fails: each dead one cost a request a 503. An idle connection's socket
has nothing to read unless the server sent something, so a poll of it (no round trip)
tells the connections worth a real check from the rest. Django's CONN_HEALTH_CHECKS
would make a round trip for every request instead (docs/reliability.md).
"""
from __future__ import annotations

import logging
import select
from typing import Any

from django.db.backends.postgresql import base

logger = logging.getLogger(__name__)


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = super().get_new_connection(conn_params)
        pool = self.pool
        if pool is None or not ended_while_idle(connection):
            return connection
        # A restart ended the pool's other idle connections too: each would be lent in
        # turn and found dead. The pool checks them all and replaces the dead.
        logger.info("a pooled database connection was ended while idle; the pool checks the others")
        pool.putconn(connection)  # found broken: the pool replaces it
        pool.check()
        return super().get_new_connection(conn_params)


def ended_while_idle(connection: Any) -> bool:
    """Whether the server ended this idle connection: it sent something (its goodbye, or
    rarely a notice) and a check with an empty statement fails."""
    from psycopg_pool import ConnectionPool

    # poll, not select: a server process holding many sockets has descriptors past
    # select's 1,024, where it raised and every connection would have counted as ended.
    poller = select.poll()
    try:
        poller.register(connection.fileno(), select.POLLIN)
    except (OSError, ValueError):  # no descriptor left to look at
        return True
    if not poller.poll(0):
        return False
    try:
        ConnectionPool.check_connection(connection)  # reads what was sent; raises for an ended one
    except Exception:
        return True
    return False
