"""People in the conversation (SPEC §1 Person, §5.1): their handles, and the session
the admin acts through on their behalf.

A person is a staff user of the admin who takes part. They act through the
identity rows agents act through: a name (``AgentName``) of kind ``human``, in a
home of its own (``limits.PEOPLE_PROJECT``), and a session of that name. So
posting, reviewing, joining, leaving notes and receiving them run the very
services REST and MCP run, with every rule those hold (scrubbing, caps, locks,
mutes, idempotency, wake-ups). Where a rule is different for people, the
service says so itself, next to the rule.

One namespace: a handle is an agent's or a person's, never both (the name's
unique constraint holds it under races). An agent's session start or name
reservation refuses a person's handle (``name_taken``,
``mailbox.services.sessions``); a person cannot claim an agent's.

The session is a record the services need (who sent a note, who received it),
not a connection: it is created ended (``Session.EndReason.PERSON``). So it
has no token that works (its token is never shown, and an ended session's
token answers ``401``), it is never connected (the admin's home page and
session caps never count it), and no note is ever bound to it: a note to a
person waits for their name (``"delivery": "name"``) until they open its
thread in the admin.
"""

from __future__ import annotations

import re

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from common import limits
from common.pause import pause_point
from mailbox import credentials
from mailbox.errors import AlreadyExists, NameTaken
from mailbox.models import AgentName, AuthorKind, Person, Project, Session, Workspace
from mailbox.services.audit import audit_record
from mailbox.services.sessions import handle_check

_HANDLE_RE = re.compile(limits.HANDLE_PATTERN)


def people_home() -> Workspace:
    """The workspace people's handles are bound to, created the first time one is."""
    project, _ = Project.objects.get_or_create(
        slug=limits.PEOPLE_PROJECT, defaults={"name": "People, in the admin"}
    )
    workspace, _ = Workspace.objects.get_or_create(project=project, slug=limits.PEOPLE_WORKSPACE)
    return workspace


def check_person_handle(user: AbstractBaseUser) -> str | None:
    """The handle ``user`` gets without being asked, or None when they must choose one.

    Their username, lower-cased, when it is a handle, not a reserved one, and
    nobody's yet (an agent's name is never taken from it).
    """
    handle = user.get_username().lower()
    if not _HANDLE_RE.match(handle) or handle in limits.RESERVED_NAMES:
        return None
    if AgentName.objects.filter(handle=handle).exists():
        return None
    return handle


def person_claim(user: AbstractBaseUser, *, handle: str, actor: str) -> Person:
    """Give ``user`` the handle ``handle``, for good, and the session the admin acts through.

    Raises ``validation_error`` (malformed or reserved), ``name_taken`` (an
    agent's name or another person's handle) and ``already_exists`` (the user
    has another handle). Claiming the handle one has changes nothing. Audited
    (``person.handle``, by ``actor``) in the same transaction.

    Inserts, and lets the handle's unique constraint decide a race: against a
    session start under the same name (which then refuses it, or made it an
    agent's first), or against the same user's claim in another tab. The
    loser looks again and answers as if it had come second.
    """
    handle = handle_check(handle, field="handle")
    try:
        return _claim(user, handle, actor=actor)
    except IntegrityError:
        pass
    return _claim(user, handle, actor=actor)


def _claim(user: AbstractBaseUser, handle: str, *, actor: str) -> Person:
    with transaction.atomic(durable=True):
        existing = Person.objects.select_related("name").filter(user_id=user.pk).first()
        if existing is not None:
            if existing.name.handle != handle:
                raise AlreadyExists(f"You already have the handle {existing.name.handle!r}.")
            return existing
        taken = AgentName.objects.filter(handle=handle).values_list("kind", flat=True).first()
        if taken is not None:
            whose = "a person's handle" if taken == AuthorKind.HUMAN else "an agent's name"
            raise NameTaken(f"{handle!r} is {whose}; choose another.")
        now = timezone.now()
        name = AgentName.objects.create(
            handle=handle, workspace=people_home(), kind=AuthorKind.HUMAN, created_at=now
        )
        _session_create(name, now=now)
        person = Person.objects.create(user=user, name=name, created_at=now)
        audit_record(actor=actor, action="person.handle", target=f"name {handle}")
        pause_point("person.claimed")
    return person


def _session_create(name: AgentName, *, now) -> Session:
    # A token is drawn so that the row looks like every other; nobody ever sees it,
    # and the session is over from the start (see the module's doc).
    token = credentials.generate(credentials.SESSION_TOKEN)
    return Session.objects.create(
        name=name,
        workspace=name.workspace,
        token_prefix=token.prefix,
        token_hash=token.digest,
        started_at=now,
        last_seen_at=now,
        ended_at=now,
        end_reason=Session.EndReason.PERSON,
    )


def person_mentions_seen(person: Person, *, upto: int) -> None:
    """The person has been shown their mentions up to ``upto`` (a mention's id):
    those count as read. Forward only, by a conditional UPDATE, so two tabs
    never move it back."""
    if upto > person.mentions_seen:
        Person.objects.filter(pk=person.pk, mentions_seen__lt=upto).update(mentions_seen=upto)
        person.mentions_seen = upto
