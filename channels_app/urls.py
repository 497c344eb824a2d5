from __future__ import annotations

from django.urls import path

from . import api, export_views, timezone_views, webhooks

urlpatterns = [
    path("qors/<slug:qor_slug>/messages", api.qor_messages, name="api-qor-messages"),
    path("qors/<slug:qor_slug>/stop", api.qor_stop, name="api-qor-stop"),
    path("qors/<slug:qor_slug>/voice-transcripts", api.qor_voice_transcripts, name="api-qor-voice-transcripts"),
    path("qors/<slug:qor_slug>/memories", api.qor_memories, name="api-qor-memories"),
    path("qors/<slug:qor_slug>/memories/<int:memory_id>", api.qor_memory_forget, name="api-qor-memory"),
    path("timezone", timezone_views.api_timezone, name="api-timezone"),
    path("export", export_views.api_export, name="api-export"),
    path("webhooks/<slug:channel>", webhooks.webhook, name="webhook"),
]
