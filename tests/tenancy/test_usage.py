"""Model usage adds up per tenant, Qor, role and day, however many calls record it at once."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from tenancy.models import Usage
from tenancy.services import usage_record

pytestmark = pytest.mark.django_db(transaction=True)


def test_calls_recorded_at_the_same_time_all_add_up_on_one_row(world):
    def record(i: int) -> None:
        try:
            usage_record(tenant=world.tenant_a, qor=world.qor_a, role="main", prompt_tokens=10, completion_tokens=i)
        finally:
            connection.close()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(record, range(40)))
    usage_record(tenant=world.tenant_b, qor=world.qor_b, role="main", prompt_tokens=1, completion_tokens=1)
    row = Usage.objects.get(tenant=world.tenant_a)
    assert (row.qor, row.role, row.calls, row.prompt_tokens, row.completion_tokens) == (
        world.qor_a, "main", 40, 400, sum(range(40)))
    assert Usage.objects.get(tenant=world.tenant_b).calls == 1
