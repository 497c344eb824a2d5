"""Fixtures of the agent's tests."""
from __future__ import annotations

import pytest

from heartbeats_app.models import Heartbeat

from ..factories.heartbeats_app import beat


@pytest.fixture
def pills(world) -> Heartbeat:
    """Alice's pills beat on tenant A's Qor, run on its heartbeat route ("beat-model") and
    delivered to her on Telegram."""
    world.qor_a.heartbeat_model = "beat-model"
    world.qor_a.save()
    return beat(world.qor_a, name="pills", prompt="Remind Alice about her pills if she has not said she took them.",
                owner=world.alice, deliver_to=world.alice, deliver_channel="telegram")
