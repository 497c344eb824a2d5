"""The admin's lists cost the same few queries however many rows a page shows: a column
that names a row's Qor ("acme/aria") must not read each Qor's tenant on its own."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from heartbeats_app.services import heartbeat_create
from memory_app.services import memory_add
from sessions_app.models import Image
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..factories.tenancy import MembershipFactory, QorFactory, UserFactory

pytestmark = pytest.mark.django_db

LISTS = ["sessions_app_session", "sessions_app_message", "sessions_app_image", "heartbeats_app_heartbeat",
         "memory_app_memory"]


def add_rows(world, count: int, prefix: str) -> None:
    """`count` Qors of acme, each with a member's chat, a message with a picture, a beat
    and a memory."""
    for n in range(count):
        qor = QorFactory(tenant=world.tenant_a, slug=f"{prefix}{n}", is_default=False)
        user = UserFactory(username=f"{prefix}-member-{n}")
        MembershipFactory(tenant=world.tenant_a, user=user)
        session = session_resolve(tenant=world.tenant_a, qor=qor, channel="web", user=user)
        message = message_append(session=session, role="user", content=f"hello {n}", channel="web").message
        Image.objects.create(tenant=world.tenant_a, message=message, mime_type="image/png", data="aGk=", size=2)
        heartbeat_create(tenant=world.tenant_a, qor=qor, name=f"{prefix}-beat-{n}", cron="0 8 * * *", prompt="?")
        memory_add(tenant=world.tenant_a, qor=qor, user=user, type="fact", content=f"{prefix} likes tea {n}")


def queries_of(client, page: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(reverse(f"admin:{page}_changelist"))
    assert response.status_code == 200
    return len(captured.captured_queries)


@pytest.mark.parametrize("page", LISTS)
def test_a_list_page_reads_no_more_for_more_rows(tenant_admin, world, page, django_assert_max_num_queries):
    add_rows(world, 2, "few")
    few = queries_of(tenant_admin, page)
    add_rows(world, 6, "more")
    with django_assert_max_num_queries(few):
        assert tenant_admin.get(reverse(f"admin:{page}_changelist")).status_code == 200
