"""`GET /v1/export` (the API token's own user) and the chat page's "Download my data":
the same export, streamed as a file, limited per person."""
from __future__ import annotations

from django.utils import timezone

from tenancy.services import api_token_create

from .export_world import of, records

EXPORT = "/v1/export"


def tokens_of(world) -> dict[str, str]:
    return {"alice": api_token_create(tenant=world.tenant_a, user=world.alice)[1],
            "charlie": api_token_create(tenant=world.tenant_b, user=world.charlie)[1]}


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_the_api_streams_the_tokens_own_users_export_as_a_file(client, world, lives):
    tokens = tokens_of(world)
    response = client.get(EXPORT, **bearer(tokens["alice"]))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("application/x-ndjson")
    today = timezone.localdate().isoformat()
    assert response["Content-Disposition"] == f'attachment; filename="qorven-acme-alice-{today}.jsonl"'
    lines = records(b"".join(response.streaming_content).decode())
    assert lines[0]["user"] == "alice" and lines[-1]["messages"] == 5
    theirs = records(b"".join(client.get(EXPORT, **bearer(tokens["charlie"])).streaming_content).decode())
    assert [m["content"] for m in of(theirs, "message")] == ["charlie's globex note"]


def test_under_asgi_the_export_goes_out_block_by_block_as_it_is_read(world, lives, monkeypatch):
    # Django's ASGI handler reads a plain iterator whole before sending a byte: the export
    # must reach it as an async one, each block read as the one before has gone out.
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    from channels_app import data_export

    monkeypatch.setattr(data_export, "BLOCK", 1)  # a block a line, at this export's size
    token = tokens_of(world)["alice"]

    async def download():
        response = await AsyncClient().get(EXPORT, headers={"Authorization": f"Bearer {token}"})
        return response, [block async for block in response.streaming_content]

    response, blocks = async_to_sync(download)()
    assert response.status_code == 200 and response.is_async
    lines = records(b"".join(blocks).decode())
    assert len(blocks) == len(lines) and lines[-1]["kind"] == "end" and lines[-1]["messages"] == 5


def test_the_api_answers_another_tenant_or_qor_like_a_missing_one(client, world, lives):
    token = tokens_of(world)["alice"]
    foreign = client.get(EXPORT + "?tenant=globex", **bearer(token))
    missing = client.get(EXPORT + "?tenant=nope", **bearer(token))
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"].replace("globex", "X") == missing.json()["error"].replace("nope", "X")
    assert client.get(EXPORT + "?qor=nope", **bearer(token)).status_code == 404
    assert client.get(EXPORT).status_code == 401
    assert client.post(EXPORT, **bearer(token)).status_code == 405


def test_the_api_gives_attachment_data_only_when_asked(client, world, photo):
    token = tokens_of(world)["alice"]
    plain = b"".join(client.get(EXPORT, **bearer(token)).streaming_content).decode()
    asked = b"".join(client.get(EXPORT + "?attachments=1", **bearer(token)).streaming_content).decode()
    assert "RkVSTlM=" not in plain and of(records(asked), "attachment")[0]["data"] == "RkVSTlM="
    assert client.get(EXPORT + "?attachments=maybe", **bearer(token)).status_code == 400


def test_exports_are_rate_limited_per_person(client, world, lives, settings):
    settings.QORVEN_EXPORT_RATE = "2/d"  # a fixed window: a day never turns over mid-test
    tokens = tokens_of(world)
    for _ in range(2):
        assert client.get(EXPORT, **bearer(tokens["alice"])).status_code == 200
    refused = client.get(EXPORT, **bearer(tokens["alice"]))
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "try again" in refused.json()["error"]
    client.force_login(world.alice)  # the page's link counts against the same allowance
    assert client.get("/chat/export/acme").status_code == 429
    assert client.get(EXPORT, **bearer(tokens["charlie"])).status_code == 200  # someone else's is their own


def test_the_chat_page_links_to_a_download_of_the_signed_in_persons_data(client, world, lives):
    client.force_login(world.alice)
    page = client.get("/chat/aria/").content.decode()
    assert 'href="/chat/export/acme"' in page and "Download my data" in page
    response = client.get("/chat/export/acme")
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="qorven-acme-alice-')
    lines = records(b"".join(response.streaming_content).decode())
    assert lines[0]["user"] == "alice" and len(of(lines, "message")) == 5


def test_the_download_needs_a_sign_in_and_a_membership(client, world, lives):
    response = client.get("/chat/export/acme")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    client.force_login(world.charlie)
    assert client.get("/chat/export/acme").status_code == 404
    assert client.get("/chat/export/nope").status_code == 404
