"""Pairing codes that ran out are deleted by the sweeper a week after: an unknown sender
who kept writing left a row a code (one an hour, for ever). Decided ones stay: who
approved or denied whom, and when."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from channels_app.models import Identity, PairingRequest
from channels_app.sweep import sweep

pytestmark = pytest.mark.django_db(transaction=True)


def _request(world, n: int, state: str, expired_days_ago: float, *, tenant=None) -> PairingRequest:
    tenant = tenant or world.tenant_a
    identity, _ = Identity.objects.get_or_create(tenant=tenant, channel="telegram", external_id=f"9{n}")
    return PairingRequest.objects.create(tenant=tenant, identity=identity, channel="telegram",
                                         external_id=identity.external_id, code=f"{n:06d}", state=state,
                                         expires_at=timezone.now() - timedelta(days=expired_days_ago))


def test_codes_that_ran_out_a_week_ago_are_deleted_and_decided_ones_kept(world):
    gone = [_request(world, 1, "pending", 8), _request(world, 2, "expired", 8), _request(world, 3, "locked", 8),
            _request(world, 4, "expired", 8, tenant=world.tenant_b)]
    kept = [_request(world, 5, "expired", 2),  # ran out recently: the owner may still look for it
            _request(world, 6, "pending", -0.04),  # still valid
            _request(world, 7, "approved", 30), _request(world, 8, "denied", 30)]
    # A sweep that ran as the worker started, before these rows, counts for the hour.
    cache.delete("qorven:pairings-pruned")
    assert sweep().pairings_pruned == 4
    assert set(PairingRequest.objects.values_list("pk", flat=True)) == {r.pk for r in kept}
    assert Identity.objects.filter(external_id="91").exists()  # the sender stays known (and unpaired)
    assert not {r.pk for r in gone} & set(PairingRequest.objects.values_list("pk", flat=True))
