"""A URL stored in the database reaches only the addresses the policy allows, whatever its
host name resolves to when the connection is made: the connection resolves the name
itself, once, and keeps to the policy with what it got (qorven.runtime.outbound). The
check before use alone left a window: a name answering a public address to the check and
a loopback or private one to the connection reached internal services. The guarded
clients still keep their connections, stream, and verify TLS against the host's name."""
from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx2
import openai
import pytest

from qorven.llm import ModelRoute, provider_for
from qorven.llm.errors import ModelRefused
from qorven.llm.openai_provider import OpenAIProvider, client_for
from qorven.runtime.outbound import AddressRefused, address_refusal
from qorven.runtime.outbound_transport import guarded_async_transport, guarded_transport
from sessions_app.models import Message
from tenancy.models import Qor
from tenancy.services import api_token_create

from ..fakes.model_server import reply
from ..fakes.rebinding_dns import PUBLIC, RebindingName

pytestmark = pytest.mark.django_db(transaction=True)


def port_of(url: str) -> int:
    return urlsplit(url).port or 80


def ask(client, world, content: str) -> None:
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201


def test_a_stored_model_url_whose_name_turns_to_loopback_after_the_check_reaches_nothing(
    client, world, model_server, drain, settings, monkeypatch
):
    """The rebinding itself: the check before the call sees a public address; the name
    then answers 127.0.0.1, where a service (here the fake model server) listens."""
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = []
    dns = RebindingName().install(monkeypatch)
    model_server.default = reply("INTERNAL-ONLY-DATA")
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=f"http://{dns.name}:{port_of(model_server.base_url)}/v1")
    ask(client, world, "hello")
    drain()
    assert dns.lookups[0] == PUBLIC and "127.0.0.1" in dns.lookups[1:]  # the check passed; the connection asked again
    assert model_server.connections == 0 and model_server.requests == []
    notice = Message.objects.get(role="system")
    assert notice.metadata["notice"] == "model_misconfigured"  # as a route the check refuses
    assert "INTERNAL-ONLY-DATA" not in notice.content and "127.0.0.1" not in notice.content
    assert not Message.objects.filter(role="assistant").exists()
    assert Message.objects.get(role="user").answer_state == "failed"


def test_the_guarded_client_refuses_a_private_address_with_no_check_before_it(model_server, settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = []
    provider = OpenAIProvider(base_url=model_server.base_url, api_key="", model="scripted-model", timeout=5,
                              max_retries=2, deadline=10, guarded=True)
    model_server.default = reply("never read")
    with pytest.raises(ModelRefused) as refused:
        provider.complete(messages=[{"role": "user", "content": "hello"}])
    assert refused.value.kind == "misconfigured" and "model route refused" in refused.value.detail
    assert "QORVEN_ALLOW_PRIVATE_HOSTS" in refused.value.detail  # the check's own words, for the admin

    # The SDK sees a connection error (not a timeout), our refusal as its cause.
    client = client_for(base_url=model_server.base_url, api_key="", timeout=5, max_retries=0, guarded=True)
    with pytest.raises(openai.APIConnectionError) as failed:
        client.models.list()
    assert not isinstance(failed.value, openai.APITimeoutError)
    assert isinstance(address_refusal(failed.value), AddressRefused)
    assert model_server.connections == 0 and model_server.requests == []


def test_an_allowed_stored_route_streams_and_keeps_its_connection(model_server, settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    provider = provider_for(ModelRoute(base_url=model_server.base_url, model="scripted-model", num_ctx=0,
                                       from_qor=True))
    streamed: list[str] = []
    for n in range(3):
        model_server.add(reply(f"Answer number {n}.", chunk_size=3))
        completion = provider.complete(messages=[{"role": "user", "content": f"question {n}"}],
                                       on_token=streamed.append)
        assert completion.content == f"Answer number {n}."
    assert "".join(streamed) == "Answer number 0.Answer number 1.Answer number 2."
    assert len([t for t in streamed if t]) > 6  # in pieces, as they came
    assert model_server.connections == 1


def test_a_name_the_host_allows_is_reached_wherever_it_resolves(model_server, settings, monkeypatch):
    dns = RebindingName().install(monkeypatch)
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = [dns.name]
    provider = provider_for(ModelRoute(base_url=f"http://{dns.name}:{port_of(model_server.base_url)}/v1",
                                       model="scripted-model", num_ctx=0, from_qor=True))
    model_server.add(reply("Over the local network."))
    assert provider.complete(messages=[{"role": "user", "content": "hi"}]).content == "Over the local network."


@pytest.fixture
def redirector():
    """A server that answers every POST with a 307 to where `target` says."""
    target: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(307)
            self.send_header("Location", target[0] + self.path.removeprefix("/v1"))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield httpd.server_address[1], target
    httpd.shutdown()
    httpd.server_close()


def test_a_redirect_from_an_allowed_server_to_a_private_address_is_not_followed_there(
    model_server, redirector, settings, monkeypatch
):
    """The SDK follows redirects; the check before use saw only the base URL."""
    port, target = redirector
    dns = RebindingName("allowed.model.test", first="127.0.0.1").install(monkeypatch)
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = [dns.name]  # this name only, not 127.0.0.1 itself
    target.append(model_server.base_url)
    provider = provider_for(ModelRoute(base_url=f"http://{dns.name}:{port}/v1", model="scripted-model",
                                       num_ctx=0, from_qor=True))
    model_server.default = reply("INTERNAL-ONLY-DATA")
    with pytest.raises(ModelRefused) as refused:
        provider.complete(messages=[{"role": "user", "content": "hello"}])
    assert refused.value.kind == "misconfigured"
    assert model_server.connections == 0 and model_server.requests == []


def test_the_hosts_own_model_server_is_not_guarded(model_server, settings):
    """OPENAI_BASE_URL is the host's choice, on loopback as often as not."""
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = []
    provider = provider_for(ModelRoute(base_url=model_server.base_url, model="scripted-model", num_ctx=0))
    model_server.add(reply("Local."))
    assert provider.complete(messages=[{"role": "user", "content": "hi"}]).content == "Local."


def test_the_async_client_of_mcp_servers_refuses_a_private_address_too(model_server, settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = []

    async def post() -> int:
        async with httpx2.AsyncClient(transport=guarded_async_transport(), timeout=5) as web:
            response = await web.post(f"{model_server.base_url}/chat/completions", json={"model": "m"})
            return response.status_code

    with pytest.raises(httpx2.ConnectError) as failed:
        asyncio.run(post())
    assert isinstance(address_refusal(failed.value), AddressRefused)
    assert model_server.connections == 0

    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    model_server.add(reply("ok"))
    assert asyncio.run(post()) == 200
    assert model_server.connections == 1


# --- TLS: the guarded connection goes to an address, the certificate is checked against the name ---

def _certificate(name: str) -> tuple[bytes, bytes, bytes]:
    """(CA certificate, server certificate, server key) in PEM, the server's for `name` only."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "qorven test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (ca.public_bytes(pem), cert.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


@pytest.fixture
def tls_server(tmp_path):
    """An HTTPS server on loopback with a certificate for tls.model.test alone; it records
    the name each client asked for (SNI)."""
    name = "tls.model.test"
    ca_pem, cert_pem, key_pem = _certificate(name)
    (tmp_path / "cert.pem").write_bytes(cert_pem + key_pem)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "cert.pem")
    asked: list[str | None] = []
    server_context.sni_callback = lambda sock, sni, ctx: asked.append(sni)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = server_context.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    client_context = ssl.create_default_context(cadata=ca_pem.decode())
    yield name, httpd.server_address[1], client_context, asked
    httpd.shutdown()
    httpd.server_close()


def test_tls_through_the_guard_is_verified_against_the_host_name(tls_server, settings, monkeypatch):
    name, port, trusted, asked = tls_server
    RebindingName(name, first="127.0.0.1").install(monkeypatch)
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    with httpx2.Client(transport=guarded_transport(verify=trusted)) as web:
        assert web.get(f"https://{name}:{port}/").text == "ok"
        assert asked == [name]  # SNI carried the name, not the address connected to
        # The same server by its address: the certificate does not name it, so it is refused.
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED|IP address mismatch"):
            web.get(f"https://127.0.0.1:{port}/")
