"""Model servers and their key belong to the host: a tenant admin cannot point a Qor
elsewhere, the host's key only goes to the host's model servers, and a Qor's stored
model URL cannot reach private addresses (nor read their answers back)."""
from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from sessions_app.models import Message
from tenancy.models import Qor
from tenancy.services import api_token_create

from ..fakes.model_server import ModelServer, error, reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def other_server():
    server = ModelServer().start()
    yield server
    server.stop()


def ask(client, world, content):
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201


def change_form(qor: Qor, **changes) -> dict:
    data = {"tenant": qor.tenant_id, "name": qor.name, "slug": qor.slug, "system_prompt": qor.system_prompt,
            "project_context": "", "tool_allowlist": "[]", "summarizer_mode": qor.summarizer_mode,
            "compact_threshold": qor.compact_threshold, "main_base_url": "", "main_model": "",
            "summarizer_base_url": "", "summarizer_model": "", "heartbeat_base_url": "", "heartbeat_model": ""}
    # The inlines (fallback routes for superusers, MCP servers): none added.
    data.update({"model_fallbacks-TOTAL_FORMS": "0", "model_fallbacks-INITIAL_FORMS": "0",
                 "model_fallbacks-MIN_NUM_FORMS": "0", "model_fallbacks-MAX_NUM_FORMS": "1000",
                 "mcp_servers-TOTAL_FORMS": "0", "mcp_servers-INITIAL_FORMS": "0",
                 "mcp_servers-MIN_NUM_FORMS": "0", "mcp_servers-MAX_NUM_FORMS": "1000"})
    data.update(changes)
    return data


@pytest.mark.parametrize("role", ["main", "summarizer", "heartbeat", "transcriber"])
def test_a_tenant_admin_cannot_change_where_a_qor_sends_its_prompts(tenant_admin, world, role):
    response = tenant_admin.post(f"/admin/qorven/qor/{world.qor_a.pk}/change/",
                                 change_form(world.qor_a, **{f"{role}_base_url": "https://attacker.example/v1",
                                                             f"{role}_model": "gpt-evil"}, name="Renamed"))
    assert response.status_code == 302
    world.qor_a.refresh_from_db()
    assert world.qor_a.name == "Renamed" and getattr(world.qor_a, f"{role}_model") == "gpt-evil"  # theirs
    assert getattr(world.qor_a, f"{role}_base_url") == ""  # the model server is not


def test_the_host_key_goes_only_to_the_hosts_model_server(client, world, model_server, other_server, drain,
                                                         settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]  # both fakes listen on loopback
    other_server.default = reply("From elsewhere.")
    model_server.default = reply("From the host's server.")
    ask(client, world, "first")
    drain()
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=other_server.base_url)
    ask(client, world, "second")
    drain()
    assert model_server.authorizations == ["Bearer test-key"]
    assert len(other_server.authorizations) == 1 and "test-key" not in other_server.authorizations[0]

    settings.QORVEN_MODEL_KEY_URLS = [other_server.base_url]  # the host trusts it with the key
    ask(client, world, "third")
    drain()
    assert other_server.authorizations[-1] == "Bearer test-key"


def test_a_stored_model_url_on_a_private_address_is_refused_and_its_answer_never_read(
    client, world, model_server, other_server, drain
):
    other_server.default = error(400, "INTERNAL-ONLY-DATA")
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=other_server.base_url)  # saved before the rule
    ask(client, world, "hello")
    drain()
    assert other_server.requests == []  # never called
    notice = Message.objects.get(role="system")
    assert notice.metadata["notice"] == "model_misconfigured"
    assert "INTERNAL-ONLY-DATA" not in notice.content and "127.0.0.1" not in notice.content
    assert Message.objects.get(role="user").answer_state == "failed"


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/v1", "http://localhost/v1", "http://10.1.2.3/v1", "http://192.168.0.5/v1",
    "http://169.254.169.254/latest", "http://[::1]/v1", "http://[::ffff:127.0.0.1]/v1", "http://0.0.0.0/v1",
    "file:///etc/passwd", "gopher://example.com/",
    # IPv6 addresses that carry a private IPv4 one, which a NAT64 gateway, a 6to4 relay or
    # the host's own stack reaches: NAT64's well-known prefix, 6to4, IPv4-compatible and
    # IPv4-translated forms, and the site-local range.
    "http://[64:ff9b::a9fe:a9fe]/latest", "http://[64:ff9b::10.0.0.5]/v1", "http://[2002:a9fe:a9fe::1]/latest",
    "http://[2002:7f00:1::]/v1", "http://[::127.0.0.1]/v1", "http://[::a9fe:a9fe]/latest",
    "http://[::ffff:0:7f00:1]/v1", "http://[fec0::1]/v1",
])
def test_saving_a_qor_with_a_private_or_odd_model_url_is_refused(world, url):
    world.qor_a.main_base_url = url
    with pytest.raises(ValidationError) as refused:
        world.qor_a.clean()
    assert "main_base_url" in refused.value.message_dict


@pytest.mark.parametrize("url", ["http://[64:ff9b::93.184.215.14]/v1", "http://[2002:5db8:d70e::1]/v1",
                                 "http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/v1"])
def test_an_ipv6_address_carrying_a_public_ipv4_one_is_taken(world, url):
    world.qor_a.main_base_url = url
    world.qor_a.clean()  # no error


def test_the_host_can_allow_a_private_model_server(world, settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["10.0.0.0/8", "localhost"]
    for url in ("http://10.1.2.3:11434/v1", "http://localhost:11434/v1", "https://93.184.215.14/v1"):
        world.qor_a.summarizer_base_url = url
        world.qor_a.clean()  # no error
