"""Password guessing on the sign-in forms is throttled per username and per address:
past the limit even the right password is refused, with a clear wait, until the window
ends. Each test signs in from an address and as users of its own (the counts live in the
cache, which on CI's second pass is a Redis shared with other tests)."""
from __future__ import annotations

import uuid

import pytest
from django.core import signing
from django.test import Client

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


# A browser that has signed in as someone carries a signed device cookie naming them
# (OWASP's "device cookies"): failures others cause on that username do not lock it out,
# and its own failures are limited on their own count.

def signed_in_browser(user, address):
    """A browser that has signed in as `user` once (and signed out): it keeps its device cookie."""
    browser = Client()
    assert sign_in(browser, "/accounts/login/", user.username, PASSWORD, address).status_code == 302
    browser.post("/accounts/logout/")
    assert "_auth_user_id" not in browser.session
    return browser


def lock_out(username, url="/accounts/login/", failures=5):
    attacker = Client()
    for n in range(failures):
        assert sign_in(attacker, url, username, "wrong-guess", f"203.0.113.{n + 1}").status_code == 200
    return attacker


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_a_user_locked_out_by_others_still_signs_in_from_a_browser_that_signed_in_before(
    settings, url, address
):
    settings.QORVEN_LOGIN_FAILURES_PER_USER = "5/15m"
    bob = person(is_staff=True)
    browser = signed_in_browser(bob, address)
    attacker = lock_out(bob.username, url)
    assert sign_in(attacker, url, bob.username, PASSWORD, "203.0.113.50").status_code == 429
    assert sign_in(Client(), url, bob.username, PASSWORD, address).status_code == 429  # a new browser waits
    assert sign_in(browser, url, bob.username, PASSWORD, address).status_code == 302
    assert int(browser.session["_auth_user_id"]) == bob.pk


def test_the_device_cookie_is_signed_http_only_same_site_and_secure_over_https(client, settings, address):
    bob = person()
    response = client.post("/accounts/login/", {"username": bob.username, "password": PASSWORD},
                           REMOTE_ADDR=address, secure=True)
    assert response.status_code == 302
    cookie = response.cookies["qorven_device"]
    assert cookie["httponly"] and cookie["secure"] and cookie["samesite"] == "Lax"
    assert int(cookie["max-age"]) >= 30 * 24 * 3600
    assert signing.loads(cookie.value, salt="qorven.login_throttle.device")["user"] == bob.username.lower()
    client.post("/accounts/logout/")
    wrong = client.post("/accounts/login/", {"username": bob.username, "password": "nope"}, REMOTE_ADDR=address)
    assert "qorven_device" not in wrong.cookies  # a failure issues none


def test_a_forged_device_cookie_or_another_users_gives_no_exemption(settings, address):
    settings.QORVEN_LOGIN_FAILURES_PER_USER = "5/15m"
    bob, alice = person(), person()
    alices_browser = signed_in_browser(alice, address)
    lock_out(bob.username)
    assert sign_in(alices_browser, "/accounts/login/", bob.username, PASSWORD, address).status_code == 429
    forged = Client()
    genuine = alices_browser.cookies["qorven_device"].value
    unsigned = signing.dumps({"user": bob.username.lower(), "device": "mine"}, key="not-the-secret",
                             salt="qorven.login_throttle.device")
    for value in (unsigned, bob.username, genuine + "x", genuine[:-1], ""):
        forged.cookies["qorven_device"] = value
        assert sign_in(forged, "/accounts/login/", bob.username, PASSWORD, address).status_code == 429


def test_failures_with_a_device_cookie_are_limited_on_their_own(settings, address):
    settings.QORVEN_LOGIN_FAILURES_PER_USER = "3/15m"
    bob = person()
    browser = signed_in_browser(bob, address)
    for _ in range(3):
        assert sign_in(browser, "/accounts/login/", bob.username, "wrong", address).status_code == 200
    refused = sign_in(browser, "/accounts/login/", bob.username, PASSWORD, address)
    assert refused.status_code == 429 and "Too many failed sign-ins" in refused.content.decode()
    # Counted for that cookie, not for the username: a browser without one may still try.
    assert sign_in(Client(), "/accounts/login/", bob.username, PASSWORD, "192.0.2.8").status_code == 302


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_a_browser_that_signed_in_before_still_signs_in_from_an_address_others_have_locked(settings, url, address):
    """An office behind one address (NAT): a colleague's, or a stranger's, wrong passwords
    used up the address's count, and the per-address limit held even for a browser with
    its device cookie; as OWASP's scheme has it, that browser is limited by its cookie."""
    settings.QORVEN_LOGIN_FAILURES_PER_ADDRESS = "4/15m"
    bob = person(is_staff=True)
    browser = signed_in_browser(bob, address)
    for _ in range(4):
        assert sign_in(Client(), url, f"nobody-{uuid.uuid4().hex[:6]}", "wrong", address).status_code == 200
    assert sign_in(Client(), url, bob.username, PASSWORD, address).status_code == 429  # a new browser waits
    assert sign_in(browser, url, bob.username, PASSWORD, address).status_code == 302
    assert int(browser.session["_auth_user_id"]) == bob.pk


def test_a_device_cookies_failures_lock_that_browser_not_its_address(settings, address):
    settings.QORVEN_LOGIN_FAILURES_PER_USER = "3/15m"
    settings.QORVEN_LOGIN_FAILURES_PER_ADDRESS = "3/15m"
    bob, colleague = person(), person()
    browser = signed_in_browser(bob, address)
    for _ in range(3):
        assert sign_in(browser, "/accounts/login/", bob.username, "wrong", address).status_code == 200
    assert sign_in(browser, "/accounts/login/", bob.username, PASSWORD, address).status_code == 429
    assert sign_in(Client(), "/accounts/login/", colleague.username, PASSWORD, address).status_code == 302


def test_the_username_limit_holds_for_every_spelling_the_form_signs_in_as(client, settings):
    """The sign-in form reads a username as Unicode's NFKC does ("ｇuess" is "guess"), so a
    count per spelling typed would give a guesser five more tries with each new spelling."""
    settings.QORVEN_LOGIN_FAILURES_PER_USER = "5/15m"
    victim = person()
    name = victim.username

    def spelled(i: int) -> str:  # the i-th character written full-width: the same name to the form
        return name[:i] + chr(ord(name[i]) + 0xFEE0) + name[i + 1:]

    for i in range(5):
        failed = sign_in(client, "/accounts/login/", spelled(i), "wrong-guess", f"203.0.113.{i + 1}")
        assert failed.status_code == 200
    refused = sign_in(client, "/accounts/login/", spelled(5), PASSWORD, "203.0.113.60")
    assert refused.status_code == 429
    assert "_auth_user_id" not in client.session
