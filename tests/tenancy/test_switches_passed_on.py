"""A platform message's task reads its tenant's switches once for its channel rules and
the turn they hand it to (tenancy.switches.switches_passed_on)."""
from __future__ import annotations

import pytest

from tenancy.models import PluginSetting
from tenancy.switches import channel_enabled, switches_passed_on, tools_enabled

pytestmark = pytest.mark.django_db


def test_the_next_read_of_a_tenants_switches_is_answered_by_the_last_and_the_one_after_is_fresh(
    world, django_assert_num_queries
):
    PluginSetting.objects.create(tenant=world.tenant_a, kind="tool", name="remember", enabled=False)
    PluginSetting.objects.create(tenant=world.tenant_b, kind="channel", name="telegram", enabled=False)
    with switches_passed_on():
        with django_assert_num_queries(1):  # every kind of the tenant's, in one statement
            assert channel_enabled(tenant=world.tenant_a, channel="telegram")
        with django_assert_num_queries(0):  # the turn's tools, from that read
            assert tools_enabled(world.tenant_a, ["remember", "recall"]) == {"recall"}
        # Switched off after: the next read is a fresh one.
        PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="telegram", enabled=False)
        PluginSetting.objects.filter(tenant=world.tenant_a, name="remember").update(enabled=True)
        with django_assert_num_queries(1):
            assert not channel_enabled(tenant=world.tenant_a, channel="telegram")
        assert tools_enabled(world.tenant_a, ["remember", "recall"]) == {"remember", "recall"}
        assert not channel_enabled(tenant=world.tenant_b, channel="telegram")  # each tenant its own
    with django_assert_num_queries(1):  # outside: every read is its own
        assert not channel_enabled(tenant=world.tenant_a, channel="telegram")
