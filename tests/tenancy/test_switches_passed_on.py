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


@pytest.mark.parametrize("switched", [True, False], ids=["some off", "none off"])
def test_a_turns_message_is_read_with_its_tenants_switches_which_answer_the_turns_tools(
    world, django_assert_num_queries, switched
):
    """The turn's first read (sessions_app.selectors.pending_with_session) brings the
    tenant's switches of every kind, and its tools are answered from them: one statement
    where the switches were one more. Another tenant's switches are not among them."""
    from sessions_app.selectors import pending_with_session
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve
    from tenancy.switches import switches_seen, switches_seen_here

    if switched:
        PluginSetting.objects.create(tenant=world.tenant_a, kind="tool", name="remember", enabled=False)
        PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="telegram", enabled=False)
    PluginSetting.objects.create(tenant=world.tenant_b, kind="tool", name="recall", enabled=False)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="hi", channel="web", awaits_answer=True, notify=False)
    with switches_seen_here():  # as a web message's turn (qorven.agent.turns.turn_process)
        with django_assert_num_queries(1):
            pending = pending_with_session(tenant_id=world.tenant_a.pk, session_id=session.pk)
            switches_seen(tenant_id=world.tenant_a.pk, switched_off=pending.switched_off)
            assert tools_enabled(world.tenant_a, ["remember", "recall"]) == ({"recall"} if switched
                                                                             else {"remember", "recall"})
        # Switched on since: every read after that one is a fresh one, as outside.
        PluginSetting.objects.filter(tenant=world.tenant_a).update(enabled=True)
        for _ in range(2):
            with django_assert_num_queries(1):
                assert tools_enabled(world.tenant_a, ["remember", "recall"]) == {"remember", "recall"}
