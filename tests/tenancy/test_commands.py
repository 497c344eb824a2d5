from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from tenancy.models import ApiToken, Membership, Qor, Tenant
from tenancy.selectors import api_token_authenticate

from ..command_help import help_text

ROOT = Path(__file__).resolve().parents[2]


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_bootstrap_creates_tenant_default_qor_and_owner_and_is_idempotent():
    run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice", "--password", "quiet-harbour-47")
    run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice")
    tenant = Tenant.objects.get()
    qor = Qor.objects.get()
    alice = get_user_model().objects.get(username="alice")
    assert (tenant.slug, qor.tenant, qor.is_default) == ("acme", tenant, True)
    assert Membership.objects.get().role == "owner"
    assert alice.is_staff and not alice.is_superuser  # a tenant admin, not the host
    assert alice.check_password("quiet-harbour-47")  # a re-run without --password keeps it


@pytest.mark.django_db
def test_bootstrap_refuses_an_owner_name_the_admin_would_refuse():
    with pytest.raises(CommandError, match="--owner: Enter a valid username"):
        run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "al ice")
    assert not Tenant.objects.exists() and not get_user_model().objects.exists()


@pytest.mark.django_db
def test_bootstrap_again_with_the_same_password_keeps_the_owner_signed_in(client):
    """`make run` bootstraps on every start: the owner's open pages must stay signed in."""
    args = ("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice")
    run(*args, "--password", "quiet-harbour-47")
    assert client.login(username="alice", password="quiet-harbour-47")
    stored = get_user_model().objects.get(username="alice").password

    run(*args, "--password", "quiet-harbour-47")
    assert get_user_model().objects.get(username="alice").password == stored  # not hashed again
    assert client.get("/chat/aria/").status_code == 200  # the session from before still holds

    run(*args, "--password", "a-different-one-58")
    assert client.get("/chat/aria/").status_code == 302  # a new password ends earlier sign-ins


@pytest.mark.django_db
def test_a_second_tenants_owner_sees_only_their_tenant_in_the_admin(client):
    from sessions_app.services.resolve import session_resolve

    run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice", "--password", "quiet-harbour-47")
    out = run("bootstrap", "--tenant", "globex", "--qor", "aria", "--owner", "gina", "--password", "amber-lantern-93")
    assert "host superuser" not in out
    acme = Tenant.objects.get(slug="acme")
    alice = get_user_model().objects.get(username="alice")
    session_resolve(tenant=acme, qor=Qor.objects.get(tenant=acme), channel="web", user=alice)
    response = client.post("/admin/login/", {"username": "gina", "password": "amber-lantern-93",
                                              "next": "/admin/sessions_app/session/"})
    assert response.status_code == 302
    listing = client.get("/admin/sessions_app/session/")
    assert listing.status_code == 200 and "acme" not in listing.content.decode()
    assert client.get("/admin/qorven/tenant/").content.decode().count("acme") == 0


@pytest.mark.django_db
def test_bootstrap_makes_a_host_superuser_only_when_asked():
    out = run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "root", "--password", "quiet-harbour-47",
              "--host-superuser")
    assert "is a host superuser" in out
    assert get_user_model().objects.get(username="root").is_superuser


@pytest.mark.django_db
@pytest.mark.parametrize("password", ["short", "password123", "12345678901", "alice2026"])
def test_bootstrap_refuses_a_weak_password(password):
    with pytest.raises(CommandError, match="--password"):
        run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice", "--password", password)
    assert not Tenant.objects.exists()


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
@pytest.mark.parametrize("option, value, suggested", [("--tenant", "Acme", "acme"), ("--qor", "My Qor", "my-qor")])
def test_a_slug_refused_says_what_a_slug_is_made_of_and_suggests_one(option, value, suggested):
    """"Acme" was refused as not "letters, digits, hyphens", which it is: a slug's letters
    are lower case, and the refusal did not say so."""
    args = {"--tenant": "acme", "--qor": "aria", "--owner": "alice", option: value}
    with pytest.raises(CommandError) as refused:
        run("bootstrap", *[part for pair in args.items() for part in pair])
    assert "lower-case letters" in str(refused.value) and f"e.g. {suggested!r}" in str(refused.value), refused.value
    assert not Tenant.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("option", ["--tenant", "--qor"])
def test_bootstrap_refuses_an_empty_slug(option):
    args = {"--tenant": "acme", "--qor": "aria", "--owner": "alice", option: ""}
    with pytest.raises(CommandError, match=f"{option} must be a slug"):
        run("bootstrap", *[part for pair in args.items() for part in pair])
    assert not Tenant.objects.exists()
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("option, value, says", [
    ("--tenant", "a" * 65, "--tenant is at most 64 characters"),
    ("--qor", "q" * 65, "--qor is at most 64 characters"),
    ("--tenant-name", "N" * 201, "--tenant-name is at most 200 characters"),
    ("--qor-name", "N" * 201, "--qor-name is at most 200 characters"),
])
def test_bootstrap_refuses_a_slug_or_name_longer_than_its_column(option, value, says):
    """SQLite stored a 200-character slug in a 64-character column (PostgreSQL refused it
    with a DataError traceback)."""
    args = {"--tenant": "acme", "--qor": "aria", "--owner": "alice", option: value}
    with pytest.raises(CommandError, match=says):
        run("bootstrap", *[part for pair in args.items() for part in pair])
    assert not Tenant.objects.exists()


@pytest.mark.django_db
def test_bootstrap_refuses_an_empty_owner_name():
    with pytest.raises(CommandError, match="--owner"):
        run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "")
    assert not Tenant.objects.exists()
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
def test_token_create_prints_a_working_token_for_a_member(world):
    raw = run("token", "create", "--tenant", "acme", "--user", "bob").strip()
    token = api_token_authenticate(raw=raw)
    assert token is not None and (token.tenant, token.user) == (world.tenant_a, world.bob)
    assert raw not in token.digest  # only the digest is stored


@pytest.mark.django_db
def test_token_create_with_days_makes_a_token_that_lapses_then(world):
    from datetime import timedelta

    from django.utils import timezone

    raw = run("token", "create", "--tenant", "acme", "--user", "bob", "--days", "30").strip()
    token = api_token_authenticate(raw=raw)
    assert abs(token.expires_at - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)
    assert api_token_authenticate(raw=run("token", "create", "--tenant", "acme", "--user", "bob").strip()).expires_at is None
    with pytest.raises(CommandError, match="--days"):
        run("token", "create", "--tenant", "acme", "--user", "bob", "--days", "0")
    with pytest.raises(CommandError, match="--days"):
        run("token", "create", "--tenant", "acme", "--user", "bob", "--days", "99999999")


@pytest.mark.django_db
def test_token_create_refuses_a_user_outside_the_tenant(world):
    with pytest.raises(CommandError, match="not a member"):
        run("token", "create", "--tenant", "globex", "--user", "alice")
    with pytest.raises(CommandError, match="no tenant"):
        run("token", "create", "--tenant", "nope", "--user", "alice")
    assert not ApiToken.objects.exists()


@pytest.mark.django_db
def test_token_create_refuses_a_deactivated_member_and_makes_no_token(world):
    """A token for a deactivated account is refused at every use: it was printed as if it
    worked."""
    world.bob.is_active = False
    world.bob.save(update_fields=["is_active"])
    with pytest.raises(CommandError, match="'bob' is deactivated") as refused:
        run("token", "create", "--tenant", "acme", "--user", "bob")
    assert refused.value.returncode == 1
    assert not ApiToken.objects.exists()


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


@pytest.mark.parametrize("argv", [("token", "create"), ("tenant", "suspend"), ("tenant", "resume"), ("tenant", "status")])
def test_each_subcommand_explains_itself_and_each_of_its_arguments(capsys, argv):
    """`qorven token create --help` showed its options under a bare usage line, no word of what it does."""
    description, arguments = help_text(capsys, *argv)
    assert not description.startswith(("options:", "positional arguments:")) and len(description) > 40
    assert arguments and all(arguments.values()), arguments


@pytest.mark.django_db
def test_token_create_refuses_a_label_longer_than_its_column(world):
    """SQLite stored a 500-character --name in a 100-character column (PostgreSQL refused
    it with a DataError traceback)."""
    with pytest.raises(CommandError, match="--name is at most 100 characters"):
        run("token", "create", "--tenant", "acme", "--user", "bob", "--name", "x" * 101)
    assert not ApiToken.objects.exists()


def test_token_create_help_sends_its_token_to_the_api_not_to_qorven_chat(capsys):
    """The help said to use the token "with `qorven chat`", which takes no token (it makes
    its own for each run): a newcomer looked in vain for where to give it."""
    description, _ = help_text(capsys, "token", "create")
    description = " ".join(description.split())
    assert "/v1/" in description and "and with `qorven chat`" not in description
    assert "`qorven chat` needs none" in description


@pytest.mark.django_db
def test_bootstrap_says_when_the_owner_cannot_sign_in_yet_and_when_their_password_is_set():
    """Without --password it printed "owner alice (created)" and "bootstrap complete": the
    owner could not sign in, and only --help said why."""
    out = run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice")
    assert "alice has no password yet" in out and "qorven changepassword alice" in out and "--password" in out
    out = run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice", "--password", "quiet-harbour-47")
    assert "no password" not in out and "alice's password is set" in out
    out = run("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice")
    assert "no password" not in out and "password is set" not in out  # kept as it was: nothing to say
