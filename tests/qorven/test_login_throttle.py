"""Password guessing on the sign-in forms is throttled per username and per address:
past the limit even the right password is refused, with a clear wait, until the window
ends. Each test signs in from an address and as users of its own (the counts live in the
cache, which on CI's second pass is a Redis shared with other tests)."""
from __future__ import annotations

import uuid

import pytest

from ..factories.tenancy import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "quiet-harbour-47"


@pytest.fixture
def address() -> str:
    return f"198.51.100.{uuid.uuid4().int % 250 + 1}"


def person(**fields):
    user = UserFactory(username=f"guess-{uuid.uuid4().hex[:8]}", **fields)
    user.set_password(PASSWORD)
    user.save()
    return user


def sign_in(client, url, username, password, address):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_five_wrong_passwords_then_even_the_right_one_waits(client, settings, url, address):
    settings.QORVEN_LOGIN_FAILURES_PER_USER = "5/15m"
    victim = person(is_staff=True)
    for _ in range(5):
        assert sign_in(client, url, victim.username, "wrong-guess", address).status_code == 200  # the form again
    refused = sign_in(client, url, victim.username, PASSWORD, address)
    assert refused.status_code == 429
    page = refused.content.decode()
    assert "Too many failed sign-ins. Try again in" in page and "minute" in page
    assert 1 <= int(refused["Retry-After"]) <= 900
    assert "_auth_user_id" not in client.session  # not signed in


def test_the_limit_is_per_username_from_anywhere(client, settings):
    settings.QORVEN_LOGIN_FAILURES_PER_USER = "3/15m"
    victim = person()
    for n in range(3):
        sign_in(client, "/accounts/login/", victim.username, "wrong", f"203.0.113.{n + 1}")
    assert sign_in(client, "/accounts/login/", victim.username, PASSWORD, "203.0.113.99").status_code == 429


def test_the_limit_is_per_address_across_usernames(client, settings, address):
    settings.QORVEN_LOGIN_FAILURES_PER_ADDRESS = "4/15m"
    for _ in range(4):
        sign_in(client, "/accounts/login/", f"nobody-{uuid.uuid4().hex[:6]}", "wrong", address)
    someone = person()
    assert sign_in(client, "/accounts/login/", someone.username, PASSWORD, address).status_code == 429
    other_address = sign_in(client, "/accounts/login/", someone.username, PASSWORD, "192.0.2.77")
    assert other_address.status_code == 302  # another address may still sign in


def test_successful_sign_ins_are_not_counted(client, settings, address):
    settings.QORVEN_LOGIN_FAILURES_PER_USER = "2/15m"
    regular = person()
    for _ in range(4):
        assert sign_in(client, "/accounts/login/", regular.username, PASSWORD, address).status_code == 302
        client.post("/accounts/logout/")
