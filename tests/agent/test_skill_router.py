"""The skill router: a learned skill with triggers answers a message that matches one of
them itself, without a model call, on a surface whose trust allows the skill."""
from __future__ import annotations

from pathlib import Path

import pytest

from memory_app.skills import SkillFileError, skill_file_parse, skills_sync
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve
from tenancy.trust import Trust

from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)

OPENING_HOURS = """---
name: opening-hours
description: When the office is open.
min_trust: paired
triggers: opening hours | when are you open? | /(what are )?(the|your) (opening )?hours\\??/
reply: We are open 9:00-17:00, Monday to Friday. (You asked: "{message}")
---
Answer questions about the office's opening hours.
"""
CLOCK = """---
name: clock
description: Tell the time.
min_trust: owner
triggers: what time is it? | time?
action: current_time
reply: Right now: {result[iso]} ({result[weekday]})
---
Call current_time.
"""
ALSO_HOURS = """---
name: also-hours
description: A second skill claiming the same phrase.
min_trust: paired
triggers: opening hours
reply: Another answer.
---
Nothing.
"""


@pytest.fixture
def skills(tmp_path: Path, settings):
    settings.QORVEN_SKILLS_DIR = str(tmp_path)

    def add(name: str, text: str) -> None:
        (tmp_path / name).write_text(text)
        report = skills_sync()
        assert not report.errors, report.errors

    return add


@pytest.fixture
def ask(world, model_server, drain):
    model_server.default = reply("from the model")

    def send(content: str, *, channel: str = "web", trust: str = Trust.OWNER) -> Message:
        chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel=channel, user=world.alice)
        inbound_accept(session=chat, content=content, channel=channel, sender_name="Alice", trust=trust)
        drain()
        return Message.objects.filter(role="assistant").order_by("-id").first()

    return send


def test_a_trigger_phrase_is_answered_by_the_router_with_no_model_call(world, skills, ask, model_server):
    skills("hours.md", OPENING_HOURS)
    answer = ask("When are you open?")
    assert answer.content == 'We are open 9:00-17:00, Monday to Friday. (You asked: "When are you open?")'
    assert answer.metadata["skill"] == "opening-hours" and answer.metadata["routed"] is True
    assert model_server.requests == []
    assert ask("what are your opening hours?").metadata["skill"] == "opening-hours"  # the expression
    assert model_server.requests == []
    assert ask("are you open on Sunday, and is there parking?").content == "from the model"  # no trigger


def test_an_action_runs_its_tool_and_an_untrusted_surface_does_not_trigger_an_owner_skill(
    world, skills, ask, model_server
):
    skills("clock.md", CLOCK)
    owner = ask("What time is it?")
    assert owner.content.startswith("Right now: 20") and owner.content.endswith("day)")
    assert owner.metadata["skill"] == "clock" and model_server.requests == []
    paired = ask("what time is it?", channel="telegram", trust=Trust.PAIRED)
    assert paired.content == "from the model" and len(model_server.requests) == 1


def test_an_ambiguous_match_goes_to_the_model_and_help_lists_the_triggers(world, skills, ask, model_server):
    skills("hours.md", OPENING_HOURS)
    skills("also.md", ALSO_HOURS)
    assert ask("opening hours").content == "from the model"
    ask("/help")
    help_text = Message.objects.filter(metadata__command="help", role="assistant").get().content
    assert "opening-hours: opening hours | when are you open?" in help_text


def test_a_skill_file_with_a_bad_trigger_or_no_reply_is_refused(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text(OPENING_HOURS.replace("/(what are )?", "/(what are "))
    with pytest.raises(SkillFileError, match="trigger"):
        skill_file_parse(bad, root=tmp_path)
    bad.write_text(OPENING_HOURS.replace('reply: We are open 9:00-17:00, Monday to Friday. (You asked: "{message}")\n',
                                         ""))
    with pytest.raises(SkillFileError, match="reply"):
        skill_file_parse(bad, root=tmp_path)


def test_the_admin_refuses_a_skill_whose_trigger_does_not_compile_and_keeps_a_good_one(tenant_admin, world):
    from memory_app.models import LearnedSkill

    form = {"tenant": world.tenant_a.pk, "name": "hours", "description": "Opening hours.", "min_trust": "paired",
            "enabled": "on", "body": "Answer about the hours.", "triggers": '["/(when/"]',
            "reply": "9 to 5.", "action": "", "action_args": "{}"}
    refused = tenant_admin.post("/admin/memory_app/learnedskill/add/", form)
    assert refused.status_code == 200 and "is not a valid regular expression" in refused.content.decode()
    assert not LearnedSkill.objects.exists()
    form["triggers"] = '["opening hours", "/when (are|do) you open\\\\??/"]'
    assert tenant_admin.post("/admin/memory_app/learnedskill/add/", form).status_code == 302
    assert LearnedSkill.objects.get().triggers == ["opening hours", "/when (are|do) you open\\??/"]


def test_a_trigger_pattern_that_would_backtrack_for_minutes_gives_up_and_matches_nothing():
    """`(\\w+\\s?)+\\?` reads as "any question", and backtracks exponentially on text that is
    not one: 48 s for 20 characters, the whole process held meanwhile (re keeps the
    interpreter). A trigger gets a short time to match, and a message over a length no
    trigger needs is not tried at all."""
    from qorven.agent.router import trigger_matches

    assert trigger_matches("/(\\w+\\s?)+\\?/", "is it raining?")
    assert not trigger_matches("/(\\w+\\s?)+\\?/", "my booking ref is K7QX2M9PLW4RT8ZBNCQQQQQQQQ")
    assert not trigger_matches("/.*/", "x" * 5000)
