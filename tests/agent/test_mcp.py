"""MCP servers' tools next to the built-ins: a small server written with the SDK (stdio and
streamable HTTP, tests/fakes/mcp_server.py), the scripted model calling its tools through
real turns, and the gates — trust, tenants, who may add a stdio server, timeouts."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qorven.agent.mcp import mcp_tools_offered
from sessions_app.models import Message
from tenancy.models import McpServer
from tenancy.services import api_token_create

from ..fakes.model_server import reply, tool_call
from ..qorven.test_model_endpoints import change_form

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
STDIO = [sys.executable, "-m", "tests.fakes.mcp_server", "stdio"]


@pytest.fixture
def mcp_http(settings):
    """The test server over streamable HTTP, refusing requests without its bearer token."""
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.mcp_server", "http", str(port), "mcp-secret"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "the MCP test server did not start"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


def ask(client, world, content: str) -> None:
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]  # alice owns acme: owner trust
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": content}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m.get("role") == "tool"]


def offered_names(request: dict) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


def test_the_model_calls_a_tool_of_a_stdio_server_and_reads_its_result(client, world, model_server, drain):
    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO)
    model_server.add(tool_call("mcp_calc_add", {"a": 2, "b": 3}), reply("Two and three make 5."))
    ask(client, world, "what is 2 + 3?")
    drain()
    assert "mcp_calc_add" in offered_names(model_server.requests[0])
    assert tool_results(model_server.requests[1]) == ["5"]
    assert Message.objects.filter(role="assistant").last().content == "Two and three make 5."
    listed = McpServer.objects.get(name="calc")
    assert {t["name"] for t in listed.tools} == {"add", "shout", "process_id", "hang"} and listed.tools_listed_at is not None
    listed.save()  # saved again (in the admin, say): listed afresh on the next turn
    assert McpServer.objects.get(name="calc").tools_listed_at is None


def test_the_model_calls_a_tool_of_an_http_server_with_its_bearer_token(client, world, model_server, drain,
                                                                       mcp_http):
    McpServer.objects.create(qor=world.qor_a, name="words", kind="http", url=mcp_http, bearer_token="mcp-secret")
    model_server.add(tool_call("mcp_words_shout", {"text": "hello"}), reply("Done."))
    ask(client, world, "shout hello")
    drain()
    assert tool_results(model_server.requests[1]) == ["HELLO"]


def test_a_long_result_is_cut_with_a_note(client, world, model_server, drain, settings):
    settings.QORVEN_MCP_RESULT_CHARS = 40
    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO)
    model_server.add(tool_call("mcp_calc_shout", {"text": "a" * 100}), reply("Long."))
    ask(client, world, "shout a lot")
    drain()
    [result] = tool_results(model_server.requests[1])
    assert result.startswith("A" * 40 + "\n[… cut: the tool returned 100 characters, 40 are shown]")


def test_a_hanging_tool_times_out_into_a_tool_error_and_the_turn_goes_on(client, world, model_server, drain,
                                                                        settings):
    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO)
    # The session is opened (a process started, its tools listed) under the default
    # timeout, which a loaded machine can need; the hanging call has 3 s.
    assert server_pid(client, world, model_server, drain).isdigit()
    settings.QORVEN_MCP_TIMEOUT = 3
    model_server.add(tool_call("mcp_calc_hang", {}), reply("It did not answer."))
    started = time.monotonic()
    ask(client, world, "wait for it")
    drain()
    assert time.monotonic() - started < 30
    result = tool_results(model_server.requests[3])[-1]  # after the first turn's
    assert json.loads(result) == {"error": "the MCP server calc did not answer within 3 s"}
    assert Message.objects.filter(role="assistant").last().content == "It did not answer."


def server_pid(client, world, model_server, drain, tool="mcp_calc_process_id") -> str:
    """One turn in which the model calls the server's process_id tool; what it read."""
    model_server.add(tool_call(tool, {}), reply("Noted."))
    ask(client, world, "which process?")
    drain()
    return tool_results(model_server.requests[-1])[-1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that exited but is not reaped yet is a zombie: gone as far as serving goes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped between the two looks, or while the file was read
        return False


def test_a_stdio_server_stays_open_between_calls_and_turns(client, world, model_server, drain):
    """Connecting starts the server's process (`npx …` takes a second or more), and a server
    may keep state between calls: the process's session stays open for the next ones."""
    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO)
    first = server_pid(client, world, model_server, drain)
    assert first.isdigit() and alive(int(first))
    assert server_pid(client, world, model_server, drain) == first


def test_a_server_that_died_fails_one_call_and_the_next_starts_it_again(client, world, model_server, drain):
    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO)
    first = int(server_pid(client, world, model_server, drain))
    os.kill(first, signal.SIGKILL)
    failed = json.loads(server_pid(client, world, model_server, drain))
    assert failed["error"].startswith("the MCP server calc failed")  # ours, not the SDK's words
    again = server_pid(client, world, model_server, drain)
    assert again.isdigit() and int(again) != first and alive(int(again))


def test_an_idle_session_is_closed_and_so_is_one_whose_server_changed(client, world, model_server, drain, settings):
    settings.QORVEN_MCP_IDLE = 0.5
    server = McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO)
    first = int(server_pid(client, world, model_server, drain))
    deadline = time.monotonic() + 10
    while alive(first):
        assert time.monotonic() < deadline, "the idle session's server still runs"
        time.sleep(0.1)
    settings.QORVEN_MCP_IDLE = 300
    second = int(server_pid(client, world, model_server, drain))
    server.command = [*STDIO, "--changed"]  # the host edits it: the open session is the old server's
    server.save()
    third = int(server_pid(client, world, model_server, drain))
    assert len({first, second, third}) == 3
    deadline = time.monotonic() + 10
    while alive(second):
        assert time.monotonic() < deadline, "the old server's session was left open"
        time.sleep(0.1)


def test_a_server_that_never_finishes_opening_is_stopped_not_left_running(world, settings, tmp_path):
    """A stdio command that starts but never answers MCP's handshake: the call gives up
    within QORVEN_MCP_TIMEOUT and the process is stopped then, not left waiting."""
    from qorven.agent.mcp import _listed

    settings.QORVEN_MCP_TIMEOUT = 1
    pid_file = tmp_path / "pid"
    mute = [sys.executable, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
            "time.sleep(120)", str(pid_file)]
    server = McpServer.objects.create(qor=world.qor_a, name="mute", kind="stdio", command=mute)
    started = time.monotonic()
    assert _listed(server) == []  # nothing listed: a warning, no tools
    assert time.monotonic() - started < 10
    pid = int(pid_file.read_text())
    # Stopped once the call gave up (~3 s with the SDK's grace to exit), not when the SDK's
    # own read timeout or the idle close got to it (~14 s).
    deadline = started + 8
    while alive(pid):
        assert time.monotonic() < deadline, "the mute server was left running"
        time.sleep(0.1)


def test_a_servers_tools_reach_only_surfaces_its_minimum_trust_allows_and_only_its_own_qor(world):
    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO)  # owner only
    assert {t.name for t in mcp_tools_offered(tenant=world.tenant_a, qor=world.qor_a, trust="owner")} == {
        "mcp_calc_add", "mcp_calc_shout", "mcp_calc_process_id", "mcp_calc_hang"}
    for trust in ("public", "paired", "trusted"):
        assert mcp_tools_offered(tenant=world.tenant_a, qor=world.qor_a, trust=trust) == []
    assert mcp_tools_offered(tenant=world.tenant_b, qor=world.qor_b, trust="owner") == []  # another tenant's Qor
    server = McpServer.objects.get(name="calc")
    server.min_trust = "paired"
    server.save()
    assert len(mcp_tools_offered(tenant=world.tenant_a, qor=world.qor_a, trust="paired")) == 4
    assert mcp_tools_offered(tenant=world.tenant_a, qor=world.qor_a, trust="public") == []


def test_the_allowlist_and_the_tenants_switch_gate_a_servers_tools(world):
    from tenancy.models import PluginSetting

    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO)
    world.qor_a.tool_allowlist = ["mcp:calc:add"]
    world.qor_a.save()
    assert [t.name for t in mcp_tools_offered(tenant=world.tenant_a, qor=world.qor_a, trust="owner")] == [
        "mcp_calc_add"]
    PluginSetting.objects.create(tenant=world.tenant_a, kind="tool", name="mcp:calc", enabled=False)
    assert mcp_tools_offered(tenant=world.tenant_a, qor=world.qor_a, trust="owner") == []


def _inline(**fields) -> dict:
    data = {"mcp_servers-TOTAL_FORMS": "1", "mcp_servers-0-enabled": "on", "mcp_servers-0-min_trust": "owner",
            "mcp_servers-0-command": "[]"}
    data.update({f"mcp_servers-0-{k}": v for k, v in fields.items()})
    return data


def test_a_tenant_admin_adds_an_http_server_but_never_a_stdio_one(tenant_admin, world, settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    url = f"/admin/qorven/qor/{world.qor_a.pk}/change/"
    form = tenant_admin.get(url).content.decode()
    assert 'name="mcp_servers-__prefix__-kind"' not in form and 'name="mcp_servers-__prefix__-command"' not in form
    refused = tenant_admin.post(url, {**change_form(world.qor_a), **_inline(
        name="shell", kind="stdio", command=json.dumps(["sh", "-c", "id"]))})
    assert refused.status_code == 200  # a server with no URL: what they may add is an HTTP one
    assert not McpServer.objects.exists()
    added = tenant_admin.post(url, {**change_form(world.qor_a), **_inline(
        name="words", kind="http", url="http://127.0.0.1:9/mcp", bearer_token="tok")})
    assert added.status_code == 302
    server = McpServer.objects.get()
    assert (server.name, server.kind, server.bearer_token) == ("words", "http", "tok")
    page = tenant_admin.get(url).content.decode()
    assert 'name="mcp_servers-0-bearer_token"' in page and ">tok<" not in page and 'value="tok"' not in page


def test_a_tenant_admin_neither_sees_the_hosts_stdio_server_nor_is_kept_from_saving_their_qor(tenant_admin, world):
    """A stdio server is a command run on the host, with the host's arguments (a key among
    them): the host's to see and change. The tenant admin's page of the Qor leaves it out,
    and saves as before."""
    from ..admin_forms import served_form

    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio",
                             command=[*STDIO, "--api-key", "host-secret-123"])
    url = f"/admin/qorven/qor/{world.qor_a.pk}/change/"
    page = tenant_admin.get(url)
    assert "host-secret-123" not in page.content.decode() and "tests.fakes.mcp_server" not in page.content.decode()
    saved = tenant_admin.post(url, {**served_form(page), "name": "Aria Two"})
    assert saved.status_code == 302
    world.qor_a.refresh_from_db()
    assert world.qor_a.name == "Aria Two"
    assert McpServer.objects.get().command[-1] == "host-secret-123"  # the host's server, as it was


def test_a_heartbeat_uses_the_tools_of_a_server_open_to_paired_surfaces(world, model_server):
    from datetime import datetime, timezone

    from qorven.agent.heartbeat_runs import run_heartbeat

    from ..factories.heartbeats_app import beat

    McpServer.objects.create(qor=world.qor_a, name="calc", kind="stdio", command=STDIO, min_trust="paired")
    pills = beat(world.qor_a, name="sum", prompt="Add 20 and 22.", owner=world.alice)
    model_server.add(tool_call("mcp_calc_add", {"a": 20, "b": 22}), reply("42."))
    result = run_heartbeat(tenant_id=world.tenant_a.pk, heartbeat_id=pills.pk,
                           tick=datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc))
    assert result.status == "ok"
    assert "mcp_calc_add" in offered_names(model_server.requests[0])
    assert tool_results(model_server.requests[1]) == ["42"]


def test_a_server_that_does_not_answer_its_listing_is_not_waited_for_on_every_turn(client, world, model_server,
                                                                                   drain, settings):
    """Listing a server's tools happens on the turn: one that accepts the connection and
    never answers held each turn for the whole QORVEN_MCP_TIMEOUT, questions that never
    use it included. After a failed listing it is let be for a while (its last list, or
    none, is offered meanwhile)."""
    import threading

    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]
    settings.QORVEN_MCP_TIMEOUT = 1.0
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])  # read nothing, answer nothing
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        McpServer.objects.create(qor=world.qor_a, name="silent", kind="http",
                                 url=f"http://127.0.0.1:{listener.getsockname()[1]}/mcp")
        model_server.default = reply("Here.")
        for n in range(3):
            ask(client, world, f"question {n}")
            drain()
        assert Message.objects.filter(role="assistant", content="Here.").count() == 3
        assert len(held) == 1  # tried on the first turn only
    finally:
        listener.close()
        for connection in held:
            connection.close()


def test_an_http_server_whose_name_turns_to_loopback_after_the_check_is_never_reached(
    client, world, model_server, drain, settings, monkeypatch
):
    """The check before opening the session sees a public address; the name then answers
    127.0.0.1, where something listens. The session's own connection resolves the name
    and keeps to the address policy, so nothing reaches the listener."""
    import threading

    from ..fakes.rebinding_dns import PUBLIC, RebindingName

    settings.QORVEN_ALLOW_PRIVATE_HOSTS = []
    dns = RebindingName("mcp.rebind.test").install(monkeypatch)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    reached: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                reached.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        McpServer.objects.create(qor=world.qor_a, name="inside", kind="http",
                                 url=f"http://{dns.name}:{listener.getsockname()[1]}/mcp")
        model_server.default = reply("Here.")
        ask(client, world, "hello")
        drain()
        assert dns.lookups[0] == PUBLIC and "127.0.0.1" in dns.lookups[1:]
        assert reached == []
        assert Message.objects.get(role="assistant").content == "Here."  # the turn went on without its tools
        assert "mcp_inside" not in json.dumps(model_server.requests[-1].get("tools") or [])
    finally:
        listener.close()
        for connection in reached:
            connection.close()
