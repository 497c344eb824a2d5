"""A read compiled once gives what its queryset gives: the row as it is now, converted by
the database's converters, with its select_related rows and annotations, and nothing
from another tenant."""
from __future__ import annotations

import pytest

from qorven.runtime.prepared_read import PreparedRead
from sessions_app.models import Session
from sessions_app.selectors import session_for_task
from sessions_app.services.resolve import session_resolve
from tenancy.models import Qor
from tenancy.selectors import api_token_authenticate
from tenancy.services import api_token_create

pytestmark = pytest.mark.django_db


def _orm(session: Session) -> Session:
    return Session.objects.select_related("tenant", "qor", "user").get(pk=session.pk)


def test_a_prepared_read_gives_the_row_its_queryset_gives_with_its_related_rows(world, django_assert_num_queries):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    with django_assert_num_queries(1):
        read = session_for_task(tenant_id=world.tenant_a.pk, session_id=session.pk)
        assert (read.tenant.slug, read.qor.slug, read.user.username) == ("acme", "aria", "alice")
    expected = _orm(session)
    for field in Session._meta.concrete_fields:
        assert getattr(read, field.attname) == getattr(expected, field.attname), field.name
    assert read.started_at.tzinfo is not None  # converted (SQLite hands back text)


def test_a_prepared_read_sees_each_change_and_a_missing_related_row_as_none(world):
    group = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-100",
                            group=True)
    assert session_for_task(tenant_id=world.tenant_a.pk, session_id=group.pk).user is None
    Session.objects.filter(pk=group.pk).update(state=Session.State.ARCHIVED)
    assert session_for_task(tenant_id=world.tenant_a.pk, session_id=group.pk).state == Session.State.ARCHIVED
    # Another tenant's id for the same row: nothing.
    assert session_for_task(tenant_id=world.tenant_b.pk, session_id=group.pk) is None


def test_a_prepared_token_read_carries_its_annotation_and_follows_the_membership(world):
    token = api_token_create(tenant=world.tenant_a, user=world.bob)[1]
    assert api_token_authenticate(raw=token).member_role == "member"
    world.tenant_a.memberships.filter(user=world.bob).update(role="admin")
    assert api_token_authenticate(raw=token).member_role == "admin"
    world.tenant_a.memberships.filter(user=world.bob).delete()
    assert api_token_authenticate(raw=token) is None


def test_a_prepared_read_names_its_parameters():
    read = PreparedRead(lambda slug: Qor.objects.filter(slug=slug)[:1], slug=str)
    with pytest.raises(TypeError):
        read.first(name="aria")
    unused = PreparedRead(lambda slug: Qor.objects.filter(slug="aria")[:1], slug=str)
    with pytest.raises(ValueError):
        unused.first(slug="aria")


def test_a_prepared_read_of_many_rows_gives_each_and_follows_every_switch(world):
    from tenancy.models import PluginSetting
    from tenancy.switches import tools_enabled

    names = {"web_fetch", "memory_save", "shell"}
    assert tools_enabled(world.tenant_a, names) == names
    for name in ("web_fetch", "shell"):
        PluginSetting.objects.create(tenant=world.tenant_a, kind=PluginSetting.Kind.TOOL, name=name, enabled=False)
    PluginSetting.objects.create(tenant=world.tenant_b, kind=PluginSetting.Kind.TOOL, name="memory_save",
                                 enabled=False)
    assert tools_enabled(world.tenant_a, names) == {"memory_save"}  # not tenant B's switch
    PluginSetting.objects.filter(tenant=world.tenant_a, name="shell").update(enabled=True)
    assert tools_enabled(world.tenant_a, names) == {"memory_save", "shell"}


def test_a_senders_identity_is_read_with_its_user_and_only_in_its_tenant(world, django_assert_num_queries):
    from channels_app.models import Identity
    from channels_app.pairing import identity_get_or_create

    Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="42", user=world.alice,
                            approval=Identity.Approval.APPROVED)
    with django_assert_num_queries(1):
        paired = identity_get_or_create(tenant=world.tenant_a, channel="telegram", external_id="42", display_name="A")
        assert paired.user.username == "alice"
    stranger = identity_get_or_create(tenant=world.tenant_b, channel="telegram", external_id="42", display_name="A")
    assert (stranger.tenant_id, stranger.user, stranger.pk != paired.pk) == (world.tenant_b.pk, None, True)
    assert identity_get_or_create(tenant=world.tenant_b, channel="telegram", external_id="42",
                                  display_name="A").pk == stranger.pk


def test_warming_runs_every_prepared_read_once_and_finds_nothing(world, django_assert_num_queries):
    """What a worker's child does as it starts (prepared_reads_warm): each read of the
    process compiled and run once, with parameters no row has, so none returns a row."""
    import gc

    import channels_app.delivery  # noqa: F401  (modules whose reads a worker runs)
    import channels_app.sending  # noqa: F401
    import channels_app.receive  # noqa: F401
    from qorven.runtime import prepared_read

    gc.collect()  # reads other tests made for themselves are gone
    reads = list(prepared_read._every)
    assert len(reads) >= 10
    with django_assert_num_queries(len(reads)):
        assert prepared_read.prepared_reads_warm() == len(reads)
    assert all(read._plan is not None for read in reads)
    values = [{name: 0 if kind is int else "" for name, kind in read._parameters.items()} for read in reads]
    assert all(read.all(**v) == [] for read, v in zip(reads, values))
