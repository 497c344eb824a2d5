"""Messages as an older version stored them, for the tests of a migration taken back: today's
append writes columns the schema before it lacks."""
from __future__ import annotations


def said_before(apps, session, content, role="user", channel="web"):
    """A message stored by an older version, on its schema (`apps`: a migration's, as
    `schema.to(...).loader.project_state(...)` gives them): today's append writes columns
    that schema lacks. Its seq taken as the append takes it."""
    from django.db import transaction

    messages, sessions = apps.get_model("sessions_app", "Message"), apps.get_model("sessions_app", "Session")
    with transaction.atomic():
        seq = sessions.objects.select_for_update().values_list("last_seq", flat=True).get(pk=session.pk) + 1
        sessions.objects.filter(pk=session.pk).update(last_seq=seq)
        return messages.objects.create(tenant_id=session.tenant_id, session_id=session.pk, seq=seq, role=role,
                                       content=content, channel=channel)


def state_at(schema, target):
    """The models as migration `target` left them, the database migrated to it."""
    return schema.to([target]).loader.project_state([target]).apps
