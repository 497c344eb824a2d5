"""The read a posted message starts from: a Qor by its slug with the caller's active
canonical session (sessions_app.qor_chat)."""
from __future__ import annotations

import pytest

from sessions_app.qor_chat import qor_chat_get
from sessions_app.services.lifecycle import session_rotate
from sessions_app.services.resolve import session_resolve
from tenancy.errors import NotFound

pytestmark = pytest.mark.django_db


def test_the_qor_comes_with_the_callers_active_chat_and_nobody_elses(world):
    assert qor_chat_get(tenant=world.tenant_a, slug="aria", user=world.alice) == (world.qor_a, None)
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    qor, found = qor_chat_get(tenant=world.tenant_a, slug="aria", user=world.alice)
    assert (qor, found) == (world.qor_a, chat)
    assert (found.kind, found.state, found.last_seq, found.started_at) == ("canonical", "active", 0, chat.started_at)
    assert qor_chat_get(tenant=world.tenant_a, slug="aria", user=world.bob) == (world.qor_a, None)
    # The other tenant's Qor of the same slug, without alice's chat with tenant A's.
    assert qor_chat_get(tenant=world.tenant_b, slug="aria", user=world.alice) == (world.qor_b, None)


def test_an_archived_chat_is_never_the_one_read(world):
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    successor = session_rotate(session=chat).session
    assert qor_chat_get(tenant=world.tenant_a, slug="aria", user=world.alice) == (world.qor_a, successor)
    world.qor_a.sessions.filter(pk=successor.pk).update(state="archived")
    assert qor_chat_get(tenant=world.tenant_a, slug="aria", user=world.alice) == (world.qor_a, None)


def test_a_missing_or_foreign_qor_is_not_found_alike(world):
    world.qor_b.slug = "globex-only"
    world.qor_b.save(update_fields=["slug"])
    for slug in ("nope", "globex-only"):
        with pytest.raises(NotFound):
            qor_chat_get(tenant=world.tenant_a, slug=slug, user=world.alice)
