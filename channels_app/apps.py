from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class ChannelsAppConfig(AppConfig):
    name = "channels_app"
    verbose_name = "Channels"

    def ready(self) -> None:
        from sessions_app.channel_kinds import Channel
        from sessions_app.signals import answers_dropped, message_appended
        from tenancy.switches import channels_register

        from .platforms import PLATFORMS

        # What a tenant can switch off: each platform, and the surfaces written on directly.
        channels_register([*PLATFORMS, Channel.WEB, Channel.TUI])

        from .delivery import on_message_appended as deliver_on_append
        from .live_events import on_message_appended

        message_appended.connect(on_message_appended, dispatch_uid="channels_app.live_events")
        message_appended.connect(deliver_on_append, dispatch_uid="channels_app.delivery")

        answers_dropped.connect(_on_answers_dropped, dispatch_uid="channels_app.strangers")

        from qorven.runtime.task_scope import task_scope_register

        # A reply a turn or a heartbeat wrote for a platform is sent by that task as it ends.
        task_scope_register(_sends_at_the_end)

        from qorven.runtime.startup import Startup, on_startup

        @on_startup("worker")
        def send_slots_of_this_run(startup: Startup) -> None:
            from .send_gate import worker_instance_start

            worker_instance_start()  # before the pool forks: its children share this run's send slots

        @on_startup("serve", "worker")
        def platform_client_build(startup: Startup) -> None:
            from .adapters.base import platform_client_build

            platform_client_build()

        @on_startup("serve")
        def webhook_bindings_warm(startup: Startup) -> None:
            # Webhooks are screened from the binding cache: a binding's first ones after a
            # start are told from junk without waiting for one of them to be stored.
            import logging

            from django.db import DatabaseError

            from .webhooks import webhook_bindings_warm

            try:
                webhook_bindings_warm()
            except DatabaseError:  # not what stops a start: they are read as their webhooks come
                logging.getLogger("channels_app.webhooks").warning(
                    "the channel bindings could not be read as the server started", exc_info=True)

        @on_startup("serve")
        def previous_run_let_go(startup: Startup) -> None:
            # Before this run's worker starts: whatever is held now was held by the last run.
            if startup.embedded:
                from .sweep import previous_run_let_go

                previous_run_let_go()

        @on_startup("serve", after_worker=True)
        def sweep_after_restart(startup: Startup) -> None:
            # On the embedded default the tasks of what the last run accepted were in its
            # memory: they are found in the database now, not a grace period later.
            if startup.embedded:
                from .tasks import sweep_task

                sweep_task.delay(restart=True)

        from django.db.models.signals import post_delete, post_save

        from tenancy.models import Qor, Tenant

        from .models import ChannelBinding
        from .platforms import webhook_bindings

        # A cached binding carries its tenant and Qor: a save of any of them clears it.
        for model in (ChannelBinding, Tenant, Qor):
            for signal in (post_save, post_delete):
                signal.connect(webhook_bindings.clear, sender=model, dispatch_uid=f"channels_app.bindings.{model.__name__}")
        # ... and what was read of a binding saved or deleted no longer tells whose a webhook
        # is, even past its time: its secret may be what changed (a leaked one replaced),
        # and a webhook signed with the old one is junk, not the binding's share.
        for signal in (post_save, post_delete):
            signal.connect(_binding_forgotten, sender=ChannelBinding, dispatch_uid="channels_app.bindings.forgotten")

        from django.contrib.auth import get_user_model
        from django.contrib.auth.signals import user_logged_out

        from tenancy.models import ApiToken, Membership

        from . import live_auth

        # What can end the sign-in behind an open chat socket (channels_app.live_auth).
        user_logged_out.connect(live_auth.on_logged_out, dispatch_uid="channels_app.live_auth.logout")
        from tenancy.signals import tenant_suspension_changed

        tenant_suspension_changed.connect(live_auth.on_tenant_suspension_changed,
                                          dispatch_uid="channels_app.live_auth.tenant_suspension")
        user = get_user_model()
        post_save.connect(live_auth.on_user_saved, sender=user, dispatch_uid="channels_app.live_auth.user")
        post_delete.connect(live_auth.on_user_deleted, sender=user, dispatch_uid="channels_app.live_auth.user_gone")
        from tenancy.models import PluginSetting

        from .models import Identity

        for model, handler in ((Membership, live_auth.on_membership_changed), (ApiToken, live_auth.on_token_changed),
                               (Identity, live_auth.on_identity_changed),
                               (ChannelBinding, live_auth.on_webchat_changed),
                               (PluginSetting, live_auth.on_webchat_changed)):
            for name, signal in (("saved", post_save), ("deleted", post_delete)):
                signal.connect(handler, sender=model, dispatch_uid=f"channels_app.live_auth.{model.__name__}.{name}")


def _on_answers_dropped(sender, **kwargs) -> None:
    # Imported when answers are first dropped, not at start-up: telling a stranger goes
    # through the adapters, which bring httpx and pydantic.
    from .strangers import on_answers_dropped

    on_answers_dropped(sender, **kwargs)


def _sends_at_the_end():
    # Imported when a task first runs, not at start-up: the tasks bring the agent and its
    # metrics, which `qorven worker --metrics-port` must set up before anything counts.
    from .tasks import sends_at_the_end

    return sends_at_the_end()


def _binding_forgotten(sender: type, instance: Any, **kwargs: Any) -> None:
    from .platforms import webhook_bindings

    # An entry is a binding, or a list of them (Slack's candidates for an app).
    webhook_bindings.forget_where(
        lambda kept: any(b.pk == instance.pk for b in (kept if isinstance(kept, list) else [kept])))
