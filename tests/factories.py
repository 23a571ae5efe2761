"""All factory-boy factories. Credentials are issued through the services, so
tests exercise the same hashing the server uses; the raw secret is kept on the
instance as ``raw_key`` / ``raw_token`` for the test to use."""

import importlib

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from mailbox import selectors, services
from mailbox.models import (
    AgentName,
    CrossProjectOptIn,
    Person,
    Project,
    ProjectKey,
    Session,
    Workspace,
)


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"project-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.replace("-", " ").title())


class WorkspaceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Workspace
        django_get_or_create = ("project", "slug")

    project = factory.SubFactory(ProjectFactory)
    slug = factory.Sequence(lambda n: f"ws-{n}")


class ProjectKeyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ProjectKey

    project = factory.SubFactory(ProjectFactory)
    label = "test key"

    @classmethod
    def _create(cls, model_class, *args, project, label="", **kwargs):
        issued = services.key_create(project, label=label, created_by="factory")
        issued.key.raw_key = issued.raw
        return issued.key


class AgentNameFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AgentName
        django_get_or_create = ("handle",)

    handle = factory.Sequence(lambda n: f"agent-{n}")
    workspace = factory.SubFactory(WorkspaceFactory)


class SessionFactory(factory.django.DjangoModelFactory):
    """A connected session started through ``session_start``; ``raw_token`` holds its token."""

    class Meta:
        model = Session

    workspace = factory.SubFactory(WorkspaceFactory)
    name = factory.Sequence(lambda n: f"agent-{n}")

    @classmethod
    def _create(cls, model_class, *args, workspace, name, **kwargs):
        key = ProjectKeyFactory(project=workspace.project)
        handle = name.handle if isinstance(name, AgentName) else name
        started = services.session_start(key, workspace_slug=workspace.slug, name=handle)
        session = started.session
        session.raw_token = started.token
        for field, value in kwargs.items():
            setattr(session, field, value)
        if kwargs:
            session.save(update_fields=list(kwargs))
        return session


class OptInFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CrossProjectOptIn

    project = factory.SubFactory(ProjectFactory)
    source = factory.SubFactory(ProjectFactory)
    created_by = "factory"
    created_at = factory.LazyFunction(timezone.now)


class UserFactory(factory.django.DjangoModelFactory):
    """A staff user of the admin; ``password`` is its password."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    is_staff = True
    password = factory.django.Password("pw")


class PersonFactory(factory.django.DjangoModelFactory):
    """A person with a handle, claimed through ``person_claim`` (the username
    lower-cased unless ``handle`` is given); ``session`` is the session the
    admin acts through for them."""

    class Meta:
        model = Person

    user = factory.SubFactory(UserFactory)

    @classmethod
    def _create(cls, model_class, *args, user, handle=None, **kwargs):
        person = services.person_claim(
            user, handle=handle or user.username.lower(), actor="factory"
        )
        person.session = selectors.person_session_for_user(user.pk)
        return person


def participants_group() -> Group:
    """The migration's ``participants`` group. A transactional test's flush empties
    every table, so an earlier one may have removed it: made again from the
    migration's own list."""
    migration = importlib.import_module("rooms.migrations.0008_participants_group")
    group, _ = Group.objects.get_or_create(name="participants")
    for app_label, codenames in migration.PARTICIPANT_PERMISSIONS.items():
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
        )
    return group
