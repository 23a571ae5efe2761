"""The first start: the ``default`` project, its workspace and one key (``make serve``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from mailbox.errors import AlreadyExists
from mailbox.models import Project, Workspace
from mailbox.selectors import project_get_for_operator
from mailbox.services.identity import project_create, workspace_create
from mailbox.services.keys import IssuedKey, key_create

DEFAULT_SLUG = "default"


@dataclass(frozen=True)
class Bootstrapped:
    project: Project
    workspace: Workspace
    project_created: bool
    workspace_created: bool
    issued: IssuedKey | None  # a key only when the project was created just now


def site_bootstrap(*, created_by: str) -> Bootstrapped:
    """Make sure the ``default`` project and workspace exist (``make serve``).

    One transaction: a key is issued only together with the project it belongs
    to, so a failure half-way cannot leave a project whose key was never shown.
    Two bootstraps racing serialise on SQLite's write lock or PostgreSQL's
    unique index; the loser finds the winner's project and issues no key.
    """
    with transaction.atomic():
        try:
            project, project_created = project_create(DEFAULT_SLUG, name="Default"), True
        except AlreadyExists:
            project, project_created = project_get_for_operator(DEFAULT_SLUG), False
        try:
            workspace, workspace_created = workspace_create(project, slug=DEFAULT_SLUG), True
        except AlreadyExists:
            workspace = Workspace.objects.get(project=project, slug=DEFAULT_SLUG)
            workspace_created = False
        issued = (
            key_create(project, label="bootstrap", created_by=created_by)
            if project_created
            else None
        )
    return Bootstrapped(project, workspace, project_created, workspace_created, issued)
