"""Fixtures of the mailbox tests: another project, ``beta``, with a connected session."""

import pytest

from tests.factories import ProjectFactory, SessionFactory, WorkspaceFactory


@pytest.fixture
def beta():
    return ProjectFactory(slug="beta")


@pytest.fixture
def beta_workspace(beta):
    return WorkspaceFactory(project=beta, slug="main")


@pytest.fixture
def bert(beta_workspace):
    """A connected session in another project."""
    return SessionFactory(workspace=beta_workspace, name="bert")
