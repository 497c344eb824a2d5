"""A process that calls models builds the client of the host's model server as it starts
(`qorven serve` and `qorven worker`, through `sdk_load`), so no turn builds one: a client
loads the CA store and the SDK's lazily imported modules, tens of milliseconds."""
from __future__ import annotations

import gc
import time

import pytest

from qorven.agent.turns import turn_process
from qorven.llm import openai_provider, sdk_load
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..conftest import emptied
from ..fakes.model_server import reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_clients():
    """This process's model clients, as a process starting has none."""
    yield from emptied(openai_provider._clients)


def test_the_host_models_client_is_built_at_start_and_the_first_turn_uses_it(world, model_server, no_clients):
    sdk_load()
    built = list(no_clients.values())
    assert len(built) == 1 and str(built[0].base_url).startswith(model_server.base_url)

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="hello?", channel="web", sender_name="Alice",
                   awaits_answer=True, notify=False, metadata={"trust": "owner"})
    model_server.add(reply("Hello."))
    assert turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk).answered == 1
    assert Message.objects.get(session=session, role="assistant").content == "Hello."
    assert list(no_clients.values()) == built  # the turn built none of its own


def test_with_no_model_configured_nothing_is_built(settings, no_clients):
    settings.QORVEN_MODEL = ""
    sdk_load()
    assert not no_clients


def test_streamed_answers_reuse_one_connection_to_the_model_server(world, model_server):
    """A model server that streams as OpenAI does keeps the connection open after each
    answer; the next call goes over it. The SDK stops reading at `[DONE]` and closes the
    response before its body has ended, which closes the connection: every model call
    opened a new one (to a remote provider, a TCP and a TLS handshake each time)."""
    from qorven.llm import ModelRoute, provider_for

    provider = provider_for(ModelRoute(base_url=model_server.base_url, model="scripted-model", num_ctx=0))
    streamed: list[str] = []
    for n in range(3):
        model_server.add(reply(f"Answer number {n}."))
        completion = provider.complete(messages=[{"role": "user", "content": f"question {n}"}],
                                       on_token=streamed.append)
        assert completion.content == f"Answer number {n}."
    assert "".join(streamed) == "Answer number 0.Answer number 1.Answer number 2."
    assert model_server.connections == 1


def test_clients_of_routes_no_longer_used_are_let_go_with_their_connections(model_server, no_clients):
    """Each route's client was kept for the life of the process, its connection to the
    model server open: every fallback whose key or URL an admin edited, every tenant
    gone, left one more. The process keeps the routes used last; the others close."""
    model_server.default = reply("ok")
    kept = openai_provider.CLIENTS_KEPT
    for i in range(kept + 40):
        client = openai_provider.client_for(base_url=model_server.base_url, api_key=f"key {i}", timeout=10,
                                            max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    del client
    gc.collect()
    assert len(no_clients) == kept
    deadline = time.monotonic() + 20
    while model_server.open_connections > kept and time.monotonic() < deadline:
        time.sleep(0.05)
    assert model_server.open_connections == kept
    # The routes used last are the ones kept: their next call opens nothing new.
    opened = model_server.connections
    last = openai_provider.client_for(base_url=model_server.base_url, api_key=f"key {kept + 39}", timeout=10,
                                      max_retries=0)
    last.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert model_server.connections == opened
