"""Pages and their endpoints: the chat page and the webchat embed (mounted at the root)."""
from __future__ import annotations

from django.urls import path

from . import export_views, timezone_views, views, webchat_views

urlpatterns = [
    path("chat/", views.chat_index, name="chat-index"),
    path("chat/api/<slug:tenant_slug>/<slug:qor_slug>/messages", views.chat_messages, name="chat-messages"),
    path("chat/api/<slug:tenant_slug>/<slug:qor_slug>/stop", views.chat_stop_view, name="chat-stop"),
    path("chat/api/<slug:tenant_slug>/<slug:qor_slug>/regenerate", views.chat_regenerate_view,
         name="chat-regenerate"),
    path("chat/api/<slug:tenant_slug>/<slug:qor_slug>/images/<int:session_id>/<int:seq>/<int:index>",
         views.chat_image_view, name="chat-image"),
    path("chat/api/<slug:tenant_slug>/<slug:qor_slug>/search", views.chat_search_view, name="chat-search"),
    path("chat/api/<slug:tenant_slug>/<slug:qor_slug>/memories", views.chat_memories_view, name="chat-memories"),
    path("chat/api/<slug:tenant_slug>/<slug:qor_slug>/memories/<int:memory_id>", views.chat_memory_forget_view,
         name="chat-memory"),
    path("chat/api/<slug:tenant_slug>/<slug:qor_slug>/conversations", views.chat_conversations,
         name="chat-conversations"),
    path("chat/api/<slug:tenant_slug>/<slug:qor_slug>/timezone", timezone_views.chat_timezone_view,
         name="chat-timezone"),
    path("chat/export/<slug:tenant_slug>", export_views.chat_export, name="chat-export"),
    path("chat/<slug:qor_slug>/", views.chat_page, name="chat-page"),
    path("webchat/<str:key>.js", webchat_views.loader, name="webchat-loader"),
    path("webchat/<str:key>/frame", webchat_views.frame, name="webchat-frame"),
    path("webchat/<str:key>/messages", webchat_views.messages, name="webchat-messages"),
    path("webchat/<str:key>/images/<int:session_id>/<int:seq>/<int:index>", webchat_views.image,
         name="webchat-image"),
]
