from __future__ import annotations

import asyncio
import json
import logging

from asgiref.sync import sync_to_async
from django.core.management.base import BaseCommand, CommandError

from channels_app.models import ChannelBinding

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Run the long-lived Discord Gateway connection for every enabled Discord binding (or "
        "one with --binding): direct messages join the user's canonical chat, server messages "
        "their channel's group session (answered when the bot is mentioned or replied to, by "
        "people paired with it unless the binding answers anyone: bind --groups). Needs the "
        "MESSAGE CONTENT intent enabled for the bot."
    )

    def add_arguments(self, parser):
        parser.add_argument("--binding", type=int, help="only this binding id")

    def handle(self, *args, **opts):
        bindings = ChannelBinding.objects.select_related("tenant", "qor").filter(kind="discord", enabled=True)
        if opts.get("binding"):
            bindings = bindings.filter(pk=opts["binding"])
        bindings = list(bindings)
        if not bindings:
            raise CommandError("No enabled Discord binding. Create one with `qorven bind discord …`.")
        self.stdout.write(f"connecting {len(bindings)} Discord bot(s)…")
        asyncio.run(self._run(bindings))

    async def _run(self, bindings: list[ChannelBinding]) -> None:
        await asyncio.gather(*(self._client(b) for b in bindings))

    async def _client(self, binding: ChannelBinding) -> None:
        import discord

        intents = discord.Intents.default()
        intents.message_content = True
        client = discord.Client(intents=intents, enable_debug_events=True)
        from channels_app.receive import gateway_frame_receive  # the adapters: not for `qorven --help`

        receive = sync_to_async(gateway_frame_receive)

        @client.event
        async def on_ready() -> None:
            self.stdout.write(f"binding {binding.pk}: connected as {client.user}")

        @client.event
        async def on_socket_raw_receive(raw: str) -> None:
            # The raw MESSAGE_CREATE payload, parsed by the same adapter code the tests use.
            try:
                frame = json.loads(raw)
            except (TypeError, ValueError):
                return
            if not isinstance(frame, dict) or client.user is None:
                return
            await receive(binding=binding, frame=frame, bot_id=str(client.user.id))

        await client.start(str(binding.credentials.get("bot_token", "")))
