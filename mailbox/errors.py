"""Domain errors of the mailbox app (identity, sessions and, later, notes)."""

from plumb_site.errors import Conflict, NotFound, PlumbError, ValidationFailed


class WorkspaceNotFound(NotFound):
    code = "workspace_not_found"
    message = "No workspace with this slug exists in the key's project."


class ProjectNotFound(NotFound):
    code = "project_not_found"
    message = "No project with this slug exists."


class KeyNotFound(NotFound):
    code = "key_not_found"
    message = "No project key matches."


class OptInNotFound(NotFound):
    code = "optin_not_found"
    message = "No such opt-in exists."


class NameInUse(Conflict):
    code = "name_in_use"
    message = "Another connected session holds this name."


class NameTaken(Conflict):
    code = "name_taken"
    message = "This name is bound to another workspace."


class AlreadyExists(Conflict):
    code = "already_exists"
    message = "This already exists."


class InvalidName(ValidationFailed):
    """A malformed handle, reported like any other field error."""


class KeyRevoked(PlumbError):
    code = "key_revoked"
    status = 401
    message = "This project key has been revoked."
