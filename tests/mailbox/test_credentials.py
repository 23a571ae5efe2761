"""Keys and tokens are stored as digests only and compared in constant time."""

import secrets
from types import SimpleNamespace

import pytest
from django.db import connection

from mailbox import credentials
from mailbox.models import ProjectKey, Session

pytestmark = pytest.mark.django_db

# A secret is 43 characters of base64url, "_" included, and may end in one: these
# pin the cases where splitting the credential on its last "_" finds one character
# or none, either of which is "in" the stored row by chance (issue #14).
SECRETS = [
    pytest.param(None, id="random"),
    pytest.param("A1b2-" * 8 + "c3_", id="ending-in-underscore"),
    pytest.param("A1b2-" * 8 + "c_3", id="underscore-before-the-last-character"),
]


@pytest.fixture
def drawn_secret(request, monkeypatch):
    """The secret part every credential drawn in the test gets (random when None)."""
    secret = request.param
    if secret is not None:
        assert credentials.CREDENTIAL_RE.match(f"plumb_key_abcd1234_{secret}")
        fixed = SimpleNamespace(choice=secrets.choice, token_urlsafe=lambda nbytes: secret)
        monkeypatch.setattr(credentials, "secrets", fixed)
    return secret


def secret_of(raw: str) -> str:
    """The secret part of ``plumb_<kind>_<prefix>_<secret>``, as the parser reads it."""
    match = credentials.CREDENTIAL_RE.match(raw)
    assert match is not None, raw
    return match.group(3)


def _all_stored_text(table: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table}")
        return repr(cursor.fetchall())


@pytest.mark.parametrize("drawn_secret", SECRETS, indirect=True)
def test_project_keys_are_stored_only_as_a_digest(drawn_secret, key_client, project_key):
    raw = project_key.raw_key
    secret_part = secret_of(raw)
    assert len(secret_part) == 43

    stored = _all_stored_text(ProjectKey._meta.db_table)

    assert raw not in stored
    assert secret_part not in stored
    row = ProjectKey.objects.get(pk=project_key.pk)
    assert row.key_hash == credentials.digest(raw)
    assert row.key_hash != raw


@pytest.mark.parametrize("drawn_secret", SECRETS, indirect=True)
def test_session_tokens_are_stored_only_as_a_digest(drawn_secret, key_client, workspace):
    token = key_client.post("/api/v1/sessions/", {"workspace": "main"}, format="json").json()[
        "token"
    ]
    secret_part = secret_of(token)
    assert len(secret_part) == 43

    stored = _all_stored_text(Session._meta.db_table)

    assert token not in stored
    assert secret_part not in stored
    assert Session.objects.get().token_hash == credentials.digest(token)


def test_a_token_with_a_known_prefix_but_wrong_secret_is_refused(session_client, agent_session):
    forged = agent_session.raw_token[:-4] + (
        "AAAA" if agent_session.raw_token[-4:] != "AAAA" else "BBBB"
    )
    session_client.credentials(HTTP_AUTHORIZATION=f"Bearer {forged}")

    response = session_client.get("/api/v1/sessions/current/")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_token"


def test_comparison_uses_constant_time_digest_check(monkeypatch):
    calls = []
    real = credentials.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(credentials.hmac, "compare_digest", spy)
    new = credentials.generate(credentials.SESSION_TOKEN)

    assert credentials.matches(new.raw, new.digest)
    assert not credentials.matches(new.raw + "x", new.digest)
    assert len(calls) == 2


def test_credentials_have_the_documented_shape():
    key = credentials.generate(credentials.PROJECT_KEY)
    token = credentials.generate(credentials.SESSION_TOKEN)

    assert credentials.parse(key.raw).kind == "key"
    assert credentials.parse(token.raw).kind == "tok"
    assert credentials.parse(key.raw).prefix == key.prefix
    assert credentials.parse("plumb_key_short") is None
    assert key.raw != credentials.generate(credentials.PROJECT_KEY).raw
