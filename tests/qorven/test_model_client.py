"""A process that calls models builds the client of the host's model server as it starts
(`qorven serve` and `qorven worker`, through `sdk_load`), so no turn builds one: a client
loads the CA store and the SDK's lazily imported modules, tens of milliseconds."""
from __future__ import annotations

import pytest

from qorven.agent.turns import turn_process
from qorven.llm import openai_provider, sdk_load
from sessions_app.models import Message
from sessions_app.services import message_append, session_resolve

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
