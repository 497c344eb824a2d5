"""A beat whose next run is in another year says which year, wherever it is shown."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from sessions_app.models import Message

from ..factories.heartbeats_app import beat
from .test_tools import say

pytestmark = pytest.mark.django_db(transaction=True)

# Celery's reading: a day must be both the 29th of February and a Monday, next in 2044.
LEAP_MONDAY = "0 9 29 2 1"


def test_beats_names_the_year_of_a_next_run_in_another_year(world, model_server, drain):
    beat(world.qor_a, name="leap-monday", cron=LEAP_MONDAY, owner=world.alice)
    beat(world.qor_a, name="every-minute", cron="* * * * *", owner=world.alice)
    session = say(world, world.alice, "/beats")
    drain()

    answer = Message.objects.filter(session=session, role="assistant").last().content
    (leap,) = [line for line in answer.splitlines() if "leap-monday" in line]
    assert "next Mon 29 Feb 2044 09:00" in leap
    (soon,) = [line for line in answer.splitlines() if "every-minute" in line]
    # this year's: no year to read past (a year, not the hour: at 20:01 it reads "20:01")
    assert re.search(r"\b\d{4}\b", soon.split("next", 1)[1]) is None, soon


def test_the_admin_beat_list_names_the_year_of_a_next_run_in_another_year(host, world):
    beat(world.qor_a, name="leap-monday", cron=LEAP_MONDAY, owner=world.alice)
    page = host.get(reverse("admin:heartbeats_app_heartbeat_changelist")).content.decode()
    assert "2044-02-29 09:00" in page
