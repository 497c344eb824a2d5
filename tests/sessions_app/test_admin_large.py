"""The messages list on a host with a long history: what it costs depends on the page
shown and the tenant asking, not on how many messages every tenant has ever written."""
from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

# Committed and emptied after (TRUNCATE): 100k rows written in a transaction that rolls
# back would leave PostgreSQL's indexes and statistics swollen for the tests after.
pytestmark = pytest.mark.django_db(transaction=True)

OTHER_TENANTS_MESSAGES = 100_000


@pytest.fixture
def long_history(world):
    """globex's one chat holds 100k messages; acme's a few."""
    acme = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    for n in range(3):
        message_append(session=acme, role="user", content=f"acme {n}", channel="web", sender_name="Alice")
    globex = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie)
    numbers = ("SELECT n FROM generate_series(1, %s) n" if connection.vendor == "postgresql" else
               "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < %s) SELECT n FROM c")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sessions_app_message (tenant_id, session_id, seq, role, content, channel, sender_name, "
            "created_at, external_scope, external_id, tool_call_id, metadata) "
            f"SELECT %s, %s, n, 'user', 'globex', 'web', 'Charlie', CURRENT_TIMESTAMP, '', '', '', '{{}}' "
            f"FROM ({numbers}) numbers",
            [world.tenant_b.pk, globex.pk, OTHER_TENANTS_MESSAGES],
        )
        cursor.execute("ANALYZE")
    yield acme
    with connection.cursor() as cursor:  # statistics of a small table again, as the next tests expect
        cursor.execute("DELETE FROM sessions_app_message WHERE session_id = %s", [globex.pk])
        cursor.execute("ANALYZE")


def messages_read_by(client, url: str) -> tuple[str, int]:
    """The page, and how many message rows its queries read (PostgreSQL's own account)."""
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    read = 0
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for query in captured.captured_queries:
                if "sessions_app_message" in query["sql"]:
                    cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query["sql"])
                    plan = cursor.fetchone()[0]
                    read += _rows_read((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    return response.content.decode(), read


def _rows_read(plan: dict) -> int:
    own = 0
    if plan.get("Relation Name") == "sessions_app_message":
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * plan.get("Actual Loops", 1)
    return own + sum(_rows_read(child) for child in plan.get("Plans", []))


def test_a_tenant_admins_messages_list_reads_their_tenants_messages_only(tenant_admin, long_history):
    page, read = messages_read_by(tenant_admin, reverse("admin:sessions_app_message_changelist"))
    assert "acme 2" in page and "globex" not in page
    assert read < 1_000  # not the 100k of another tenant, to find acme's three


def test_the_hosts_messages_list_counts_no_further_than_it_can_page(host, long_history):
    page, read = messages_read_by(host, reverse("admin:sessions_app_message_changelist"))
    assert "More than 10,000 messages" in page
    assert read < 25_000
