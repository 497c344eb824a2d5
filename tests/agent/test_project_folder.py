"""A Qor's project folder: AGENTS.md, else CLAUDE.md, else README.md is its project context,
read again when it changes; only the host's superusers may set the folder."""
from __future__ import annotations

import os

import pytest

from qorven.agent.gateway import inbound_accept
from sessions_app.services.resolve import session_resolve
from tenancy.models import Qor
from tenancy.trust import Trust

from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ask(world, model_server, drain):
    model_server.default = reply("ok")

    def send(content: str) -> str:
        chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
        inbound_accept(session=chat, content=content, channel="web", sender_name="Alice", trust=Trust.OWNER)
        drain()
        return model_server.requests[-1]["messages"][0]["content"]

    return send


def folder_set(world, path) -> None:
    Qor.objects.filter(pk=world.qor_a.pk).update(project_folder=str(path), project_context="From the text field.")


def test_the_project_file_is_the_project_context_and_an_edit_reaches_the_next_prompt(world, ask, tmp_path):
    (tmp_path / "README.md").write_text("The readme.")
    (tmp_path / "CLAUDE.md").write_text("Use British spelling.")
    agents = tmp_path / "AGENTS.md"
    agents.write_text("This project builds a harbour timetable.")
    folder_set(world, tmp_path)

    system = ask("what are we building?")
    assert "## Project context\nThis project builds a harbour timetable." in system
    assert "British" not in system and "From the text field" not in system
    # The project context comes before what changes from turn to turn (the prompt cache keeps it).
    assert system.index("## Project context") < system.index("The current message came from")

    agents.write_text("This project builds a ferry timetable.")
    os.utime(agents, ns=(agents.stat().st_atime_ns, agents.stat().st_mtime_ns + 1_000_000_000))
    assert "ferry timetable" in ask("and now?")

    agents.unlink()
    assert "Use British spelling." in ask("and without AGENTS.md?")  # CLAUDE.md, then README.md


def test_a_long_project_file_is_cut_with_a_note_and_a_missing_one_falls_back_to_the_text(world, ask, tmp_path,
                                                                                          settings):
    settings.QORVEN_PROJECT_FILE_CHARS = 100
    folder_set(world, tmp_path)
    assert "From the text field." in ask("no files yet")
    (tmp_path / "README.md").write_text("x" * 500)
    system = ask("a long readme")
    assert "x" * 100 + "\n[… the rest of README.md is left out]" in system and "x" * 101 not in system


def test_a_tenant_admin_cannot_set_the_project_folder(tenant_admin, world):
    from ..qorven.test_model_endpoints import change_form

    response = tenant_admin.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/",
                                 change_form(world.qor_a, project_folder="/etc", name="Renamed"))
    assert response.status_code == 302
    world.qor_a.refresh_from_db()
    assert world.qor_a.name == "Renamed" and world.qor_a.project_folder == ""


def test_the_host_sets_it_to_an_existing_folder_only(host, world, tmp_path):
    from ..qorven.test_model_endpoints import change_form

    for bad in ("relative/path", str(tmp_path / "missing")):
        response = host.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/", change_form(world.qor_a, project_folder=bad))
        assert response.status_code == 200 and "is not an absolute path to a folder" in response.content.decode()
    response = host.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/",
                         change_form(world.qor_a, project_folder=str(tmp_path)))
    assert response.status_code == 302
    world.qor_a.refresh_from_db()
    assert world.qor_a.project_folder == str(tmp_path)
