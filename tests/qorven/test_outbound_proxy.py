"""Behind an outbound proxy (tests/fakes/http_proxy.py, a real one on loopback). The host's
own clients (OPENAI_BASE_URL, the platforms' API bases) follow the environment's
HTTP_PROXY / HTTPS_PROXY / NO_PROXY, as any HTTP client on the machine does. The clients of
URLs stored in the database connect directly unless the host sets QORVEN_OUTBOUND_PROXY;
then they go through the proxy (CONNECT for https, the absolute URL for http), NO_PROXY
still sends a host direct, and each request's target is first checked by the address
policy (qorven.runtime.outbound) — a private one is refused before the proxy is asked."""
from __future__ import annotations

import json
import logging
import socket
from typing import Any

import httpx2
import pytest
from environ import ImproperlyConfigured

from channels_app.adapters import base as platform_base
from qorven.llm import ModelRoute, openai_provider, provider_for
from qorven.llm.errors import ModelError, ModelRefused
from qorven.runtime.environment import Env
from qorven.runtime.outbound_transport import guarded_transport
from sessions_app.models import Message
from tenancy.models import McpServer, Qor

from ..agent.test_mcp import ask as ask_aria
from ..agent import test_mcp
from ..agent.test_mcp import tool_results
from ..channels_app.test_doctor import checks_of, doctor
from ..conftest import emptied
from ..fakes.model_server import reply, tool_call
from ..fakes.rebinding_dns import PUBLIC, RebindingName
from .test_cli import configuration_error, run
from . import test_outbound_transport
from .test_outbound_transport import port_of

pytestmark = pytest.mark.django_db(transaction=True)

# Fixtures of those tests, used here too.
tls_server = test_outbound_transport.tls_server
redirector = test_outbound_transport.redirector
mcp_http = test_mcp.mcp_http


@pytest.fixture(autouse=True)
def no_clients():
    """Clients are built once per process and read the proxy settings then: none is left
    from another test."""
    kept = emptied(openai_provider._clients)
    next(kept)
    platforms = emptied(platform_base._clients)
    next(platforms)
    yield
    for done in (kept, platforms):
        next(done, None)


def stored(url: str):
    """The provider of a model route stored on a Qor (guarded)."""
    return provider_for(ModelRoute(base_url=url, model="scripted-model", num_ctx=0, from_qor=True))


def answer(provider) -> str:
    return provider.complete(messages=[{"role": "user", "content": "hi"}]).content


# --- the host's own clients: the environment's proxy, as every client on the machine ---


def test_the_hosts_model_server_and_the_platforms_are_reached_through_the_environments_proxy(
    model_server, platform, http_proxy, monkeypatch, settings
):
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url)
    model_server.add(reply("Through the proxy."))
    assert answer(provider_for(ModelRoute(base_url=model_server.base_url, model="scripted-model", num_ctx=0))) \
        == "Through the proxy."
    platform_base.platform_client().get(f"{settings.TELEGRAM_API_BASE}/bot1:A/getMe")
    assert http_proxy.targets() == [f"POST {model_server.base_url}/chat/completions",
                                    f"GET {settings.TELEGRAM_API_BASE}/bot1:A/getMe"]


def test_no_proxy_sends_the_hosts_own_clients_direct(model_server, platform, http_proxy, monkeypatch, settings):
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    model_server.add(reply("Direct."))
    assert answer(provider_for(ModelRoute(base_url=model_server.base_url, model="scripted-model", num_ctx=0))) \
        == "Direct."
    platform_base.platform_client().get(f"{settings.TELEGRAM_API_BASE}/bot1:A/getMe")
    assert http_proxy.requests == [] and len(platform.requests) == 1


# --- stored URLs ---


def test_without_the_setting_a_stored_route_ignores_the_environments_proxy(model_server, http_proxy, monkeypatch,
                                                                          settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url)
    monkeypatch.setenv("HTTPS_PROXY", http_proxy.url)
    model_server.add(reply("Direct, as ever."))
    assert answer(stored(model_server.base_url)) == "Direct, as ever."
    assert http_proxy.requests == [] and model_server.connections == 1


def test_a_qors_stored_route_goes_through_the_environments_proxy_when_the_host_opts_in(
    client, world, model_server, http_proxy, drain, monkeypatch, settings
):
    settings.QORVEN_OUTBOUND_PROXY = "env"
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url)
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=model_server.base_url)
    model_server.add(reply("Answered through the proxy."))
    ask_aria(client, world, "hello")
    drain()
    assert Message.objects.get(role="assistant").content == "Answered through the proxy."
    assert f"POST {model_server.base_url}/chat/completions" in http_proxy.targets()


def test_a_proxy_url_of_its_own_carries_its_credentials_to_the_proxy_and_never_into_a_log_or_error(
    model_server, http_proxy, settings, caplog
):
    caplog.set_level(logging.DEBUG)
    http_proxy.credentials = ("qorven", "proxy-pass-1234")
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    settings.QORVEN_OUTBOUND_PROXY = http_proxy.url_with_credentials()  # no proxy variable in the environment
    model_server.add(reply("Signed in."))
    assert answer(stored(model_server.base_url)) == "Signed in."
    (asked,) = http_proxy.requests
    assert asked.target == f"{model_server.base_url}/chat/completions" and asked.authorization.startswith("Basic ")

    settings.QORVEN_OUTBOUND_PROXY = http_proxy.url_with_credentials().replace("proxy-pass-1234", "wrong-pass-5678")
    with pytest.raises(ModelError) as refused:
        answer(stored(model_server.base_url + "/"))  # another route: a client of its own, with the new setting
    assert "wrong-pass-5678" not in str(refused.value) + refused.value.detail
    assert "proxy-pass-1234" not in caplog.text and "wrong-pass-5678" not in caplog.text
    assert len(model_server.requests) == 1


def test_no_proxy_sends_a_stored_route_direct_and_still_under_the_policy(model_server, http_proxy, monkeypatch,
                                                                        settings):
    settings.QORVEN_OUTBOUND_PROXY = "env"
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    model_server.add(reply("Direct."))
    assert answer(stored(model_server.base_url)) == "Direct."
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = []
    with pytest.raises(ModelRefused) as refused:
        answer(stored(model_server.base_url))
    assert "QORVEN_ALLOW_PRIVATE_HOSTS" in refused.value.detail
    assert http_proxy.requests == [] and len(model_server.requests) == 1


def test_a_socks_proxy_of_the_environment_is_skipped_with_a_warning_that_hides_its_password(
    model_server, http_proxy, monkeypatch, settings, caplog
):
    settings.QORVEN_OUTBOUND_PROXY = "env"
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv("ALL_PROXY", "socks5://qorven:socks-pass-4321@127.0.0.1:9")
    model_server.add(reply("Direct."))
    assert answer(stored(model_server.base_url)) == "Direct."
    assert "socks5://***@127.0.0.1:9 skipped" in caplog.text and "socks-pass-4321" not in caplog.text


def test_a_private_target_is_refused_by_the_policy_before_the_proxy_is_asked(model_server, http_proxy, monkeypatch,
                                                                             settings):
    settings.QORVEN_OUTBOUND_PROXY = "env"
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = []
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url)
    model_server.default = reply("INTERNAL-ONLY-DATA")
    with pytest.raises(ModelRefused) as refused:
        answer(stored(model_server.base_url))
    assert refused.value.kind == "misconfigured" and "model route refused" in refused.value.detail
    assert "QORVEN_ALLOW_PRIVATE_HOSTS" in refused.value.detail  # the policy's own words

    # A name that resolves here to a private address: the proxy (which would reach it) is not asked either.
    RebindingName("inside.model.test", first="10.0.0.7", then="10.0.0.7").install(monkeypatch)
    http_proxy.hosts["inside.model.test"] = "127.0.0.1"
    with pytest.raises(ModelRefused):
        answer(stored(f"http://inside.model.test:{port_of(model_server.base_url)}/v1"))
    assert http_proxy.requests == [] and model_server.requests == []


class UnknownHere:
    """A name this machine's resolver does not know (only the proxy's network does)."""

    def __init__(self, name: str) -> None:
        self.name, self.lookups, self._real = name, 0, socket.getaddrinfo

    def getaddrinfo(self, host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.lower().rstrip(".") == self.name:
            self.lookups += 1
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self._real(host, *args, **kwargs)


def test_a_name_only_the_proxy_can_resolve_is_left_to_the_proxy(model_server, http_proxy, monkeypatch, settings):
    settings.QORVEN_OUTBOUND_PROXY = "env"
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = []
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url)
    unknown = UnknownHere("models.outside.test")
    monkeypatch.setattr(socket, "getaddrinfo", unknown.getaddrinfo)
    http_proxy.hosts[unknown.name] = "127.0.0.1"  # on the proxy's side of the network
    url = f"http://{unknown.name}:{port_of(model_server.base_url)}/v1"
    model_server.add(reply("From beyond the proxy."))
    assert answer(stored(url)) == "From beyond the proxy."
    assert http_proxy.targets() == [f"POST {url}/chat/completions"] and unknown.lookups >= 1


def test_https_through_the_proxy_is_a_tunnel_with_tls_verified_against_the_name(tls_server, http_proxy, monkeypatch,
                                                                                 settings):
    name, port, trusted, asked = tls_server
    settings.QORVEN_OUTBOUND_PROXY = "env"
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = []
    monkeypatch.setenv("HTTPS_PROXY", http_proxy.url)
    dns = RebindingName(name, first=PUBLIC, then=PUBLIC).install(monkeypatch)  # public here
    http_proxy.hosts[name] = "127.0.0.1"  # where the proxy finds it
    with httpx2.Client(transport=guarded_transport(verify=trusted)) as web:
        assert web.get(f"https://{name}:{port}/").text == "ok"
    assert http_proxy.targets() == [f"CONNECT {name}:{port}"]
    assert asked == [name] and dns.lookups  # SNI carried the name; the policy looked the name up


def test_a_redirect_through_the_proxy_to_a_private_address_is_not_followed(
    model_server, redirector, http_proxy, monkeypatch, settings
):
    port, target = redirector
    settings.QORVEN_OUTBOUND_PROXY = "env"
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url)
    dns = RebindingName("allowed.model.test", first="127.0.0.1", then="127.0.0.1").install(monkeypatch)
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = [dns.name]  # this name only, not 127.0.0.1 itself
    target.append(model_server.base_url)
    model_server.default = reply("INTERNAL-ONLY-DATA")
    with pytest.raises(ModelRefused) as refused:
        answer(stored(f"http://{dns.name}:{port}/v1"))
    assert refused.value.kind == "misconfigured"
    assert http_proxy.targets() == [f"POST http://{dns.name}:{port}/v1/chat/completions"]
    assert model_server.requests == []


def test_an_mcp_server_over_http_is_reached_through_the_proxy(client, world, model_server, drain, mcp_http,
                                                               http_proxy, monkeypatch, settings):
    settings.QORVEN_OUTBOUND_PROXY = "env"
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url)
    monkeypatch.setenv("NO_PROXY", f"127.0.0.1:{port_of(model_server.base_url)}")  # the model server: direct
    McpServer.objects.create(qor=world.qor_a, name="words", kind="http", url=mcp_http, bearer_token="mcp-secret")
    model_server.add(tool_call("mcp_words_shout", {"text": "hello"}), reply("Done."))
    ask_aria(client, world, "shout hello")
    drain()
    assert tool_results(model_server.requests[1]) == ["HELLO"]
    assert http_proxy.targets() and all(t.startswith(f"POST {mcp_http}") or t.startswith(f"GET {mcp_http}")
                                        or t.startswith(f"DELETE {mcp_http}") for t in http_proxy.targets())


def test_doctor_asks_a_stored_route_through_the_proxy_and_names_it_without_its_credentials(
    world, model_server, http_proxy, settings
):
    world.qor_b.delete()
    http_proxy.credentials = ("qorven", "proxy-pass-1234")
    settings.QORVEN_OUTBOUND_PROXY = http_proxy.url_with_credentials()
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=model_server.base_url)
    model_server.default = reply("ok")
    report, _ = doctor()  # on PostgreSQL, the checks of workers and the deploy fail here: not this test's
    (model,) = checks_of(report, "model")
    assert model["ok"] and f"through the proxy {http_proxy.url}" in model["detail"], model
    assert "proxy-pass-1234" not in json.dumps(report)
    assert http_proxy.targets() == [f"POST {model_server.base_url}/chat/completions"]


def test_a_proxy_setting_that_is_no_proxy_url_is_a_configuration_error_without_its_password(monkeypatch):
    done = run("check", DJANGO_SECRET_KEY="cli-test", QORVEN_OUTBOUND_PROXY="socks5://user:pw-9876@proxy.internal:1080")
    line = configuration_error(done)
    assert "QORVEN_OUTBOUND_PROXY" in line and "socks5://***@proxy.internal:1080" in line, line
    assert "pw-9876" not in done.stderr + done.stdout
    for value in ("proxy.internal:3128", "http://user:pw-9876@/", "http://user:pw-9876@proxy.internal/path", "envv",
                  "http://proxy.internal:port"):
        monkeypatch.setenv("QORVEN_OUTBOUND_PROXY", value)
        with pytest.raises(ImproperlyConfigured) as refused:
            Env().outbound_proxy("QORVEN_OUTBOUND_PROXY", default="")
        assert "pw-9876" not in str(refused.value)
    for value in ("", "env", "http://proxy.internal:3128", "https://user:pw@proxy.internal", "http://[fd00::1]:3128/"):
        monkeypatch.setenv("QORVEN_OUTBOUND_PROXY", value)
        assert Env().outbound_proxy("QORVEN_OUTBOUND_PROXY", default="") == value
