from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from tenancy.models import Membership, Qor, Tenant


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    first_name = factory.Faker("first_name")
    password = factory.django.Password("pw-for-tests-1")


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())


class QorFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Qor

    tenant = factory.SubFactory(TenantFactory)
    slug = factory.Sequence(lambda n: f"qor-{n}")
    name = factory.LazyAttribute(lambda q: q.slug.title())
    is_default = True


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    tenant = factory.SubFactory(TenantFactory)
    user = factory.SubFactory(UserFactory)
    role = Membership.Role.MEMBER
