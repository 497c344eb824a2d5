"""The platforms start-up registers without importing the adapters are the adapters'."""
from __future__ import annotations

from channels_app.adapters import ADAPTERS
from channels_app.platforms import PLATFORMS
from tenancy.switches import switchable_channels


def test_the_platforms_named_at_start_up_are_the_registrys_in_its_order():
    # The admin's binding page shows a credentials section per platform in this order.
    assert PLATFORMS == tuple(ADAPTERS)


def test_each_platform_can_be_switched_off():
    assert set(ADAPTERS) <= switchable_channels
