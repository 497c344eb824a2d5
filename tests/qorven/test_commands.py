from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from qorven.models import Membership, Qor, Tenant
from qorven.selectors import api_token_authenticate

ROOT = Path(__file__).resolve().parents[2]


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_bootstrap_creates_tenant_default_qor_and_owner_and_is_idempotent():
    run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice", "--password", "s3cret-pass")
    run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice")
    tenant = Tenant.objects.get()
    qor = Qor.objects.get()
    alice = get_user_model().objects.get(username="alice")
    assert (tenant.slug, qor.tenant, qor.is_default) == ("acme", tenant, True)
    assert Membership.objects.get().role == "owner"
    assert alice.is_superuser and alice.is_staff
    assert alice.check_password("s3cret-pass")  # a re-run without --password keeps it


@pytest.mark.django_db
def test_bootstrap_a_second_qor_makes_it_the_default():
    run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice")
    run("bootstrap", "--tenant", "acme", "--qor", "nova", "--owner", "alice")
    assert list(Qor.objects.filter(is_default=True).values_list("slug", flat=True)) == ["nova"]
    assert Qor.objects.count() == 2


@pytest.mark.django_db
def test_bootstrap_rejects_a_slug_with_spaces():
    with pytest.raises(CommandError):
        run("bootstrap", "--tenant", "Acme Inc", "--qor", "aria", "--owner", "alice")
    assert not Tenant.objects.exists()


@pytest.mark.django_db
def test_token_create_prints_a_working_token_for_a_member(world):
    raw = run("token", "create", "--tenant", "acme", "--user", "bob").strip()
    token = api_token_authenticate(raw=raw)
    assert token is not None and (token.tenant, token.user) == (world.tenant_a, world.bob)
    assert raw not in token.digest  # only the digest is stored


@pytest.mark.django_db
def test_token_create_refuses_a_user_outside_the_tenant(world):
    with pytest.raises(CommandError, match="not a member"):
        run("token", "create", "--tenant", "globex", "--user", "alice")
    with pytest.raises(CommandError, match="no tenant"):
        run("token", "create", "--tenant", "nope", "--user", "alice")


def test_qorven_console_command_accepts_hyphenated_names():
    qorven = Path(sys.executable).with_name("qorven")
    result = subprocess.run(
        [str(qorven), "sync-no-such-command"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert "Unknown command: 'sync_no_such_command'" in result.stderr
    help_text = subprocess.run(
        [str(qorven), "bootstrap", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert help_text.returncode == 0
    assert "default Qor" in help_text.stdout
