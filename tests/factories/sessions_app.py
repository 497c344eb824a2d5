from __future__ import annotations

import factory

from sessions_app.models import Session

from .tenancy import QorFactory, UserFactory


class CanonicalSessionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Session

    qor = factory.SubFactory(QorFactory)
    tenant = factory.SelfAttribute("qor.tenant")
    user = factory.SubFactory(UserFactory)
    kind = Session.Kind.CANONICAL
