"""Secret scrubbing (SPEC 3.5), measured on a corpus both ways.

Every secret below is fake: random bodies with the right prefix, length and
alphabet. Prefixes are glued on at run time ("ghp" + "_...") so that secret
scanners reading this file do not mistake the fixtures for leaks.
"""

import random
import re

import pytest

from common.scrubbing import ScrubResult, scrub
from mailbox import credentials

DASHES = "-" * 5


def pem(label: str, *lines: str) -> str:
    return "\n".join([f"{DASHES}BEGIN {label}{DASHES}", *lines, f"{DASHES}END {label}{DASHES}"])


GITHUB_CLASSIC = "ghp" + "_kfhfgtKAQWYm85EZgslmBp65HpUbz04IfkvX"
GITHUB_OAUTH = "gho" + "_L9M9Z6QuSgBMGbBwLHQd9DppsJcRwbos8Ljv"
GITHUB_APP = "ghs" + "_30zU8JaLrh2mT4EsmcBXmCZuPyYBz3EMHj8R"
GITHUB_FINE_GRAINED = (
    "github" + "_pat_PyO33QJBu0kiSmRCJtvJzU_"
    "4774OmBI1yICxqKQ4OVM9bFT5chiRVwlI6xfMTZiUaFFtbuUgngnGwIfria"
)
GITLAB_PAT = "glpat" + "-RGx5ejxEyPqRaGpJi2QW"
GITLAB_DEPLOY = "gldt" + "-pGVSboDUk0pYkAvAkaKU"
GITLAB_RUNNER = "glrt" + "-HkQlbhRqicx2e5IRF84I"
SLACK_BOT = "xoxb" + "-204815936421-5103862947712-QQIgtmu4XYqeTVFLSfJak0g7"
SLACK_USER = "xoxp" + "-204815936421-2047719303321-6120334458104-00fc01735c59c929f53f63d37cf34338"
SLACK_WEBHOOK = "https://hooks.slack" + ".com/services/T04QX8B2K/B05RZ1L9M/WMdtIyX0CsfVVUWxEBTl3Swj"
STRIPE_LIVE = "sk" + "_live_51NqZ2vGumG8vtLy9yRRigaQpKq2v0aLPxw"
STRIPE_TEST = "sk" + "_test_51NqZ2vYJsGgIWTmsHDc8Z3PsYruppU4WWzEI6bmUdk2V4MGxso9lUNO"
STRIPE_RESTRICTED = "rk" + "_live_51NqZ2vKJZDqKk5F1TWaW96Fwsxh7yy"
STRIPE_WEBHOOK = "whsec" + "_jTPmQ8R665VhHcZsMiLbs27BokULALtD"
OPENAI_PROJECT = (
    "sk" + "-proj-_3XlhY4hCjIqNREX6a426B_jKn1yP84cB8aldMgIaRiIuNhJa5T6ky0RhKdgtkFM71h4ALHZ"
    "oHYRNbo51vNsVipSEsQL8JjRlwHnVKjtL5PfXrOJKpsVSr66pZwLlfoDyA8PiKRfIXUIksaSVJH70TO2yATZ"
)
OPENAI_LEGACY = "sk" + "-OOg6Nul89nWfQHi15hX7T3BlbkFJIseEO7YX2myHlSMqeYL6"
OPENAI_SERVICE = (
    "sk" + "-svcacct-0OKxOM3D0hPN4ucpJo_xSEKHm7KTPIP7n3inqbYQUbgprrCyySMlo95Uq-B7LBZg"
    "_JujHrD37f0QiEV3DIv8sSLl8lZjyQbfjIV7"
)
ANTHROPIC_API = (
    "sk" + "-ant-api03-RNd-c_V3wkmXG8f4UYXSbV6iFhrH9d3EGnl8cWKdKQlOUGrcMCYo5N5EGwjbaag2QH"
    "vJlRcYmDx3RiyUfOPK3YCbP04aE-AA"
)
ANTHROPIC_ADMIN = (
    "sk" + "-ant-admin01-5vCZ9rlppxQIhHaJ_-lKAFszb2mhDu89zLGh6Sff9W2vBfm0m0C2-a_pqWMD-dFbA"
    "BpZQ9Z4VtxfVVhG-AA"
)
GOOGLE_MAPS = "AIza" + "SyCpkUz88MCZUFhlx0YzKbUTqOZVlHf25RP"
GOOGLE_FIREBASE = "AIza" + "SyFZwIHZAoBEf6CdvCzvEmDS_kkFVMvABK8"
AWS_KEY_ID = "AKIA" + "ER5LT9DQ7JQFT6SJ"
AWS_STS_KEY_ID = "ASIA" + "7OEEAF82LVEK6SSR"
AWS_SECRET_1 = "u6XprIa/S4HLwwNYzB+" + "sJZ6qPlmIXbhQKaeq5wMu"
AWS_SECRET_2 = "3vayp4nmIpT8tRc7P20" + "ukK4hx8vaF+MIUk+mRs7B"
AWS_SECRET_3 = "y6bIhVcnq8IrTEtlQok" + "I5tZFA7Z2nJsmh8ohBRJ5"
PLUMB_KEY = "plumb_key" + "_0qfojufv_JexAUcNPm3fdvzz__7g9tKT0w_fzwV8WS23sAHN03GR"
PLUMB_TOKEN = "plumb_tok" + "_ojhcxe1g_h1Qz80KNUNZJvm2Yo85lEJjpW1wpKM1zMRolgx2l93j"
NPM = "npm" + "_Ga1tQGXVGZdgQfpoOh9vXKrKmePMO5iSQBb4"
PYPI = (
    "pypi" + "-AgEIcHlwaS5vcmcCJDNmMzFjNTQ5LTVjYjQtNDcyMS1iNDg1Sp1PiQVGcA1aJZRMdXLgbOKAJ5e"
    "UAjtlise7JEwOuFL3am5z4bqM-SMYK58MGQZYBr-o_OzSJnQbCJikxmURxcYXmFaMuMfistWCP67gI6bIfz2Y"
)
HUGGING_FACE = "hf" + "_DlNgzWthPgDeDcoAZMjJlfMhsTbewqGIhg"
SENDGRID = "SG" + ".yn-bAGnlkO-TMG30om6uoU.Zam8ujONRKZdTova92wIvq7_cGOEy_7-n1XR9mb4ikT"
JWT_HS256 = ".".join(
    [
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
        "eyJzdWIiOiJhZ2VudC00MiIsImlzcyI6InBsdW1iLmV4YW1wbGUiLCJleHAiOjE3NjcyMjU2MDB9",
        "T8u5mM9sZZ8yA0AwkypjBtyY47F7NqTO3SF1uKELpn0",
    ]
)
JWT_RS256 = ".".join(
    [
        "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0",
        "eyJzdWIiOiJhZ2VudC00MiIsImlzcyI6InBsdW1iLmV4YW1wbGUiLCJleHAiOjE3NjcyMjU2MDB9",
        "O__8A4iyDj-UgwgFbmXKxVWdFVIjAaoTywhNlAkOG58mRMShMo92zTalqkX9899wTJ8dlF1tGIq7QcatrYLHoT",
    ]
)
OPAQUE_TOKEN = "PV0ACtmeimB6aiDEePaPxzn2MJAwDHJ9ZRijWy9u"
DRF_TOKEN = "483b7d5d42f82352f7d28ac9ae893bcffb69e61a"
GOOGLE_ACCESS_TOKEN = (
    "ya29" + ".a0AfH6SM9a8462HwltfCdh4zveu2huDYiWLe91myPxXn-XurDMh7FdxUTDqkex3OAMbgpHskVlsTZc0AV"
)
GOOGLE_SERVICE_TOKEN = "ya29" + ".c.c0ASRK0GbZq3vYpL7mN2xW8tRkE4uJ9hQ1aF6dS0gC5iV3bX7nM2lO9pT4"
BASIC_CREDENTIALS = "ZGVwbG95OldxN3ZOMnBMczk="  # base64("deploy:Wq7vN2pLs9")
AZURE_STORAGE_KEY = (
    "Zq7Lm2Xc9Vb4Nw8Rt1Yp6Ks3Hd5Fg0Ja2Ue7OiAb1Cd3EfGh5Ij7K"
    "l9Mn1Op3Qr5St7Uv9Wx1Yz3Ab5C/d7Ef9Gh1Ij3+Kl5Mn7Op=="
)
TWILIO_API_KEY = "SK" + "2f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c"

RSA_KEY = pem(
    "RSA PRIVATE KEY",
    "MIIEpAIBAAKCAQEAvLaTekFAv3WgTv7toKkgacOWhQktJPLKBJ2HhTwWyoT3k29qEl",
    "SRzo+IbzzIiZ0EJlJfTrXKoP5RIGa2WbR+FKgf7aTVqBL233KB2uDZpwMVxj5E+W",
    "w5Z0KVx3J3cDfnTJi2dMeTqA5wae1PsA3NYpQV5PsISNKWfpctjAJ4x1HwvtTlLP",
)
OPENSSH_KEY = pem(
    "OPENSSH PRIVATE KEY",
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "hNkDK5/OUTPxTCxXMFaLci9djCKvvpsaZQVswNG+JcPH49U0/GONW6uP/CsjC4by",
    "73ia9aLkQW4BY3lj/8SLuW88iWwGsPiSF8kfrPL+AQ1do4Y6Bn9B4K6FRWYeuxj1",
)
EC_KEY = pem(
    "EC PRIVATE KEY",
    "MHcCAQEEIT0xHNqH1Ql/H6AnDdNSBY7uH+WzFlOyT1IXglmYyja56vVDMvI5yKc9Fm",
    "+CCh+8VE/1Q86WbAiERWaROvUbYxh8HUSN2J2n0qxY6QXTUhDI/HfGXf8Rp4yk7i",
)
PGP_KEY = pem(
    "PGP PRIVATE KEY BLOCK",
    "",
    "lQOYBGZ0ZXN0AQgAw5Z0KVx3J3cDfnTJi2dMeTqA5wae1PsA3NYpQV5PsISNKWfp",
    "rpxL/0aTHVB7OYt01Ml9wSVymHUd4xRIBzjn1xjVGkvcfpOuo2D06DFMbnQZ1giQ",
    "=Xk3q",
)
PKCS8_KEY_ESCAPED = pem(
    "PRIVATE KEY",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCrpxL/0aTHVB7O",
    "Yt01Ml9wSVymHUd4xRIBzjn1xjVGkvcfpOuo2D06DFMbnQZ1giQ73ia9aLkQW4BY",
).replace("\n", "\\n")

# (kind, line, secret): the secret as it appears in the line.
SECRETS = [
    ("github_token", f"export GITHUB_TOKEN={GITHUB_CLASSIC}", GITHUB_CLASSIC),
    ("github_token", f'{{"access_token": "{GITHUB_OAUTH}", "scope": "repo"}}', GITHUB_OAUTH),
    (
        "github_token",
        f"git clone https://x-access-token:{GITHUB_APP}@github.com/acme/api.git",
        GITHUB_APP,
    ),
    ("github_token", f'GH_TOKEN="{GITHUB_FINE_GRAINED}" gh pr list', GITHUB_FINE_GRAINED),
    (
        "gitlab_token",
        f'curl --header "PRIVATE-TOKEN: {GITLAB_PAT}" https://gitlab.example.com/api/v4/projects',
        GITLAB_PAT,
    ),
    (
        "gitlab_token",
        f"git clone https://gitlab+deploy-token-12:{GITLAB_DEPLOY}@gitlab.example.com/acme/api.git",
        GITLAB_DEPLOY,
    ),
    ("gitlab_token", f"gitlab-runner register --token {GITLAB_RUNNER}", GITLAB_RUNNER),
    ("slack_token", f"SLACK_BOT_TOKEN={SLACK_BOT}", SLACK_BOT),
    ("slack_token", f"slack = WebClient(token='{SLACK_USER}')", SLACK_USER),
    (
        "slack_token",
        f'curl -X POST -d \'{{"text": "deploy done"}}\' {SLACK_WEBHOOK}',
        SLACK_WEBHOOK,
    ),
    ("stripe_key", f'stripe.api_key = "{STRIPE_LIVE}"', STRIPE_LIVE),
    ("stripe_key", f"STRIPE_SECRET_KEY={STRIPE_TEST}", STRIPE_TEST),
    ("stripe_key", f"The reporting job uses {STRIPE_RESTRICTED} (read-only).", STRIPE_RESTRICTED),
    ("stripe_key", f"  webhook_secret: {STRIPE_WEBHOOK}", STRIPE_WEBHOOK),
    ("openai_key", f"OPENAI_API_KEY={OPENAI_PROJECT}", OPENAI_PROJECT),
    ("openai_key", f'client = OpenAI(api_key="{OPENAI_LEGACY}")', OPENAI_LEGACY),
    (
        "openai_key",
        f"I rotated the service account key, the new one is {OPENAI_SERVICE}",
        OPENAI_SERVICE,
    ),
    ("anthropic_key", f"ANTHROPIC_API_KEY={ANTHROPIC_API}", ANTHROPIC_API),
    (
        "anthropic_key",
        f"curl https://api.anthropic.com/v1/organizations/me -H 'x-api-key: {ANTHROPIC_ADMIN}'",
        ANTHROPIC_ADMIN,
    ),
    (
        "google_api_key",
        f"GET https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key={GOOGLE_MAPS}",
        GOOGLE_MAPS,
    ),
    ("google_api_key", f'  apiKey: "{GOOGLE_FIREBASE}",', GOOGLE_FIREBASE),
    ("jwt", f"DEBUG auth: id_token={JWT_RS256} accepted", JWT_RS256),
    ("jwt", f"Set-Cookie: session={JWT_HS256}; Path=/; HttpOnly", JWT_HS256),
    ("jwt", f'curl -H "Authorization: Bearer {JWT_HS256}" https://api.example.com/me', JWT_HS256),
    (
        "bearer_token",
        f"curl -H 'Authorization: Bearer {OPAQUE_TOKEN}' https://api.example.com/v2/jobs",
        OPAQUE_TOKEN,
    ),
    ("bearer_token", f"Authorization: Token {DRF_TOKEN}", DRF_TOKEN),
    (
        "google_oauth_token",
        f'headers = {{"Authorization": "Bearer {GOOGLE_ACCESS_TOKEN}"}}',
        GOOGLE_ACCESS_TOKEN,
    ),
    ("basic_auth", f"Authorization: Basic {BASIC_CREDENTIALS}", BASIC_CREDENTIALS),
    ("basic_auth", "curl -u deploy:Wq7vN2pLs9 https://ci.example.com/api/json", "Wq7vN2pLs9"),
    (
        "url_credentials",
        "DATABASE_URL=postgres://app:Tr0ub4dor-3x@db.internal:5432/app",
        "Tr0ub4dor-3x",
    ),
    ("url_credentials", "CELERY_BROKER_URL=redis://:p4ssw0rdR3dis@cache:6379/0", "p4ssw0rdR3dis"),
    (
        "url_credentials",
        "mongosh 'mongodb+srv://admin:Xk9mQ2vL7pR4@cluster0.ab1cd.mongodb.net/test'",
        "Xk9mQ2vL7pR4",
    ),
    ("url_credentials", "amqp://worker:9fJ2k@Lm0Qw@rabbit:5672/ is down", "9fJ2k@Lm0Qw"),
    ("password_assignment", "DB_PASSWORD=correcthorse42", "correcthorse42"),
    ("password_assignment", "  password: hunter2hunter2", "hunter2hunter2"),
    ("password_assignment", '{"username": "deploy", "password": "Zq8!rT3#vW"}', "Zq8!rT3#vW"),
    (
        "password_assignment",
        'conn = psycopg.connect(host="db", user="app", password="n0t-s0-s3cret")',
        "n0t-s0-s3cret",
    ),
    ("password_assignment", "mysql -u root --password=Sup3rS3cret! -h db", "Sup3rS3cret!"),
    (
        "password_assignment",
        "docker login registry.example.com -u ci --password Qw3rtyUi0p",
        "Qw3rtyUi0p",
    ),
    ("password_assignment", "ALTER USER app WITH PASSWORD 'n3w-P4ssw0rd';", "n3w-P4ssw0rd"),
    ("password_assignment", "export PGPASSWORD=s3cr3t-pg-pw", "s3cr3t-pg-pw"),
    ("password_assignment", "**Password:** Tr1cky-0ne", "Tr1cky-0ne"),
    ("password_assignment", "      POSTGRES_PASSWORD: correcthorsebattery", "correcthorsebattery"),
    ("password_assignment", "docker compose exec db mysql -uroot -pR00tPw-42 app", "R00tPw-42"),
    ("password_assignment", "    <password>m4ven-Deploy-pw</password>", "m4ven-Deploy-pw"),
    (
        "secret_assignment",
        "  client_secret: 7d8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b",
        "7d8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b",
    ),
    ("secret_assignment", 'api_key = "4e7a1c9b2d8f6e3a0b5c"', "4e7a1c9b2d8f6e3a0b5c"),
    (
        "secret_assignment",
        "SECRET_KEY = 'django-insecure-9xk2!m@7q#z4&w8v'",
        "django-insecure-9xk2!m@7q#z4&w8v",
    ),
    ("secret_assignment", "X-API-Key: 3b1f8e2a9c7d4f6b0e5a", "3b1f8e2a9c7d4f6b0e5a"),
    (
        "secret_assignment",
        "https://api.example.com/v1/data?access_token=9c4e1a7b3f2d8e6a&format=json",
        "9c4e1a7b3f2d8e6a",
    ),
    ("secret_assignment", '{\\"api_key\\": \\"a8F3kQ9zL2mX7v\\"}', "a8F3kQ9zL2mX7v"),
    ("secret_assignment", 'app.config["SECRET_KEY"] = "a9f8e7d6c5b4"', "a9f8e7d6c5b4"),
    (
        "secret_assignment",
        "Cookie: django_language=en; sessionid=8c1f2a9d7e3b4c5a6f0e1d2c",
        "8c1f2a9d7e3b4c5a6f0e1d2c",
    ),
    ("aws_access_key_id", f"aws_access_key_id = {AWS_KEY_ID}", AWS_KEY_ID),
    (
        "aws_access_key_id",
        f'{{"AccessKeyId": "{AWS_STS_KEY_ID}", "Expiration": null}}',
        AWS_STS_KEY_ID,
    ),
    ("aws_secret_access_key", f"aws_secret_access_key = {AWS_SECRET_1}", AWS_SECRET_1),
    ("aws_secret_access_key", f'    "SecretAccessKey": "{AWS_SECRET_2}",', AWS_SECRET_2),
    ("aws_secret_access_key", f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET_3}", AWS_SECRET_3),
    ("private_key", f"Here is the deploy key:\n{RSA_KEY}\nplease add it to CI.", RSA_KEY),
    ("private_key", f"$ cat ~/.ssh/id_ed25519\n{OPENSSH_KEY}\n", OPENSSH_KEY),
    ("private_key", f"```\n{EC_KEY}\n```", EC_KEY),
    ("private_key", f"gpg --export-secret-keys --armor bob\n{PGP_KEY}", PGP_KEY),
    (
        "private_key",
        f'  "private_key": "{PKCS8_KEY_ESCAPED}\\n",',
        PKCS8_KEY_ESCAPED,
    ),
    ("plumb_project_key", f"PLUMB_KEY={PLUMB_KEY}", PLUMB_KEY),
    ("plumb_session_token", f"Authorization: Bearer {PLUMB_TOKEN}", PLUMB_TOKEN),
    ("npm_token", f"//registry.npmjs.org/:_authToken={NPM}", NPM),
    ("pypi_token", f"[pypi]\nusername = __token__\npassword = {PYPI}", PYPI),
    ("huggingface_token", f"huggingface-cli login --token {HUGGING_FACE}", HUGGING_FACE),
    ("sendgrid_key", f"SENDGRID_API_KEY='{SENDGRID}'", SENDGRID),
    # Passwords people choose: quoted phrases with spaces, plain words, lower-case keys.
    (
        "password_assignment",
        'password: "correct horse battery staple"',
        "correct horse battery staple",
    ),
    ("password_assignment", 'password="my pass phrase"', "my pass phrase"),
    ("password_assignment", "password: correcthorsebattery", "correcthorsebattery"),
    ("password_assignment", "  - db_password: 'staple battery horse'", "staple battery horse"),
    ("password_assignment", 'psql --password "tr0ub4dor and three"', "tr0ub4dor and three"),
    ("password_assignment", "**Password:** correcthorsebattery", "correcthorsebattery"),
    # The whole value goes, punctuation inside it included.
    ("password_assignment", "DB_PASSWORD=Tr0ub4dor&3", "Tr0ub4dor&3"),
    ("password_assignment", "password: Tr0ub;4dor,3x", "Tr0ub;4dor,3x"),
    ("secret_assignment", "API_SECRET=a9f8&e7d6)c5b4", "a9f8&e7d6)c5b4"),
    (
        "password_assignment",
        "Server=db;Database=app;User Id=app;Password=Tr0ub4dor&3;Encrypt=true",
        "Tr0ub4dor&3",
    ),
    # Short and non-JWT bearer values.
    ("bearer_token", "Authorization: Bearer abcdefghij", "abcdefghij"),
    ("bearer_token", "curl -H 'Authorization: Bearer s3cr3t' https://api.example.com", "s3cr3t"),
    ("bearer_token", '{"Authorization": "Token letmeinplease"}', "letmeinplease"),
    ("bearer_token", "DEBUG sent Bearer 9f8e7d6c5b4a to the proxy", "9f8e7d6c5b4a"),
    # Google OAuth access tokens, alone or in an assignment.
    ("google_oauth_token", f"export ACCESS_TOKEN={GOOGLE_ACCESS_TOKEN}", GOOGLE_ACCESS_TOKEN),
    (
        "google_oauth_token",
        f"gcloud printed {GOOGLE_SERVICE_TOKEN} and it expires in an hour",
        GOOGLE_SERVICE_TOKEN,
    ),
    # URL passwords that are also dictionary or placeholder words.
    ("url_credentials", "https://user:pass@host", "pass"),
    ("url_credentials", "redis://:secret@cache:6379/0", "secret"),
    ("url_credentials", "git clone https://bob:password@git.example.com/x.git", "password"),
    # Tokens glued to a word, or URL- or JSON-encoded.
    (
        "github_token",
        f"https://app.example.com/cb?next=%2Fhome%26access_token%3D{GITHUB_CLASSIC}",
        GITHUB_CLASSIC,
    ),
    ("github_token", f"q=deploy%20{GITHUB_CLASSIC}", GITHUB_CLASSIC),
    ("github_token", f"MY_TOKEN_{GITHUB_CLASSIC}", GITHUB_CLASSIC),
    ("github_token", f'{{"log": "token:\\n{GITHUB_CLASSIC}"}}', GITHUB_CLASSIC),
    ("slack_token", f"channel-{SLACK_BOT}", SLACK_BOT),
    ("aws_access_key_id", f"id%3D{AWS_KEY_ID}", AWS_KEY_ID),
    (
        "secret_assignment",
        "https://app.example.com/login?next=%2Fcb%3Faccess_token%3D9c4e1a7b3f2d8e6a%26state%3Dx",
        "9c4e1a7b3f2d8e6a",
    ),
    # Azure storage account keys, Twilio API keys, sshpass -p.
    (
        "azure_storage_key",
        "DefaultEndpointsProtocol=https;AccountName=acme;"
        f"AccountKey={AZURE_STORAGE_KEY};EndpointSuffix=core.windows.net",
        AZURE_STORAGE_KEY,
    ),
    ("azure_storage_key", f'AZURE_STORAGE_ACCOUNT_KEY="{AZURE_STORAGE_KEY}"', AZURE_STORAGE_KEY),
    (
        "azure_storage_key",
        f"az storage blob list --account-name acme --account-key {AZURE_STORAGE_KEY} -o table",
        AZURE_STORAGE_KEY,
    ),
    ("twilio_api_key", f"TWILIO_API_KEY={TWILIO_API_KEY}", TWILIO_API_KEY),
    (
        "twilio_api_key",
        f'client = Client("{TWILIO_API_KEY}", api_secret, account_sid)',
        TWILIO_API_KEY,
    ),
    ("password_assignment", "sshpass -p 'S3cr3t!' ssh root@10.0.0.5", "S3cr3t!"),
    ("password_assignment", "sshpass -p raspberry ssh pi@10.0.0.5", "raspberry"),
    ("password_assignment", "sshpass -pS3cr3tPw scp dist.tar.gz deploy@host:", "S3cr3tPw"),
    ("password_assignment", "sshpass -v -p hunter2x rsync -a ./ host:/srv", "hunter2x"),
    ("password_assignment", 'sshpass -p "tr0ub4dor and three" ssh ci@build', "tr0ub4dor and three"),
    # A token broken across two lines by terminal wrapping at a fixed column.
    (
        "github_token",
        f"$ echo $GITHUB_TOKEN\n{GITHUB_CLASSIC[:24]}\n{GITHUB_CLASSIC[24:]}\n$ ",
        f"{GITHUB_CLASSIC[:24]}\n{GITHUB_CLASSIC[24:]}",
    ),
    (
        "github_token",
        f"export GH_TOKEN={GITHUB_FINE_GRAINED[:64]}\r\n{GITHUB_FINE_GRAINED[64:]}",
        f"{GITHUB_FINE_GRAINED[:64]}\r\n{GITHUB_FINE_GRAINED[64:]}",
    ),
    (
        "jwt",
        f"Authorization: Bearer {JWT_HS256[:50]}\n{JWT_HS256[50:]}",
        f"{JWT_HS256[:50]}\n{JWT_HS256[50:]}",
    ),
]

# Lines that mention passwords, tokens and keys, or carry hashes and base64,
# without a secret in them: they must come back byte for byte.
CLEAN = [
    "Fixed in 3f9a2b1, see the PR for details.",
    "git checkout 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "a1b2c3d Fix token refresh race (#42)",
    "request 6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f failed with 502",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  empty.txt",
    "sha512: cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce"
    "47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
    "docker pull python@sha256:2e4f0c8a3b9d1e7f6a5c4b3a2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e",
    "image: ghcr.io/acme/api:1.4.2@sha256:"
    "9b1f3c5d7e9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d3e5f7a9b1c",
    "![dot](data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==)",
    "payload: eyJ1c2VyIjogImJvYiIsICJyb2xlIjogImFkbWluIn0=",
    "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVT",
    'password = input("Password: ")',
    "password: str",
    "def set_password(self, raw_password: str) -> None:",
    "def connect(*, host: str, password: str | None = None) -> Connection:",
    'user.set_password(form.cleaned_data["password"])',
    'password = os.environ["DB_PASSWORD"]',
    'api_key = os.getenv("OPENAI_API_KEY")',
    "const apiKey = process.env.STRIPE_API_KEY;",
    'token = request.headers.get("Authorization", "").removeprefix("Bearer ")',
    'if not token: raise PermissionDenied("missing token")',
    "password=None",
    "login(username=username, password=password)",
    '"password": ""',
    'password = "********"',
    "password: <your-password>",
    "PASSWORD=${PASSWORD}",
    "DB_PASSWORD=${DB_PASSWORD:?must be set}",
    "api_key: ${{ secrets.OPENAI_API_KEY }}",
    "export OPENAI_API_KEY=sk-...",
    'SECRET_KEY = env("DJANGO_SECRET_KEY")',
    "AUTH_PASSWORD_VALIDATORS = [",
    'read -s -p "Password: " DB_PASSWORD',
    'echo "$CR_PAT" | docker login ghcr.io -u bob --password-stdin',
    "docker run -u 1000:1000 -e POSTGRES_PASSWORD_FILE=/run/secrets/db_password postgres:16",
    "The password is stored hashed with Argon2, never in plain text.",
    "Rotate your API keys every 90 days; a leaked token is revoked within minutes.",
    "Set the Authorization: Bearer header to your session token.",
    "Bearer tokens are sent in the Authorization header, not in the query string.",
    "Authorization: Bearer <token>",
    'curl -H "Authorization: Bearer $PLUMB_TOKEN" https://plumb.example.com/api/v1/rooms/',
    "const token = await getToken();",
    "fetch(url, { headers: { Authorization: `Bearer ${token}` } })",
    "https://docs.example.com/api/v1/tokens?page=2&sort=-created",
    "ssh://git@gitlab.example.com:2222/acme/api.git",
    "git clone https://alice@example.com/acme/repo.git",
    "postgres://localhost:5432/app",
    "http://[::1]:8080/health",
    "Contact ops@example.com or security@example.org if a key leaks.",
    "## Secrets\n\n- Never commit `.env` files.\n- Use `plumb key create` to mint keys.",
    "2024-05-01T12:00:00Z INFO auth: token=expired user=bob ip=10.0.0.1",
    "Bumped django from 5.0.6 to 5.2.19 (and tried v6.0.0-rc.1).",
    "task-sk-1 is blocked on task-sk-2; scikit-learn needs an upgrade.",
    "plumb key list shows plumb_key_ab12cd34_\u2026 and plumb_key_ab12cd34",
    pem("CERTIFICATE", "MIIBszCCAVmgAwIBAgIUFakeCertificateBodyForTestsOnly0wCgYIKoZIzj0E"),
    pem("PUBLIC KEY", "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFakePublicKeyBodyForTestsOnly"),
    "  secretName: api-tls",
    "max_tokens=4096, temperature=0.2",
    '"usage": {"prompt_tokens": 1234, "completion_tokens": 567, "total_tokens": 1801}',
    'ssh-keygen -t ed25519 -C "bob@example.com"',
    "SELECT id, password_hash FROM users WHERE email = %s;",
    '"token": "string"',
    "token_type: bearer",
    "password: !vault |",
    "export GITHUB_TOKEN=ghp_" + "x" * 36,
    "aws_access_key_id = AKIA" + "IOSFODNN7EXAMPLE",
    "mkdir -p /tmp/plumb && mysql -u root -p app",
    "pytest -p no:django tests/mailbox",
    'reset_url_token = "set-password"',
    "docker run -e POSTGRES_PASSWORD=mysecretpassword -d postgres:16",
    '    Token: "#d8dee9",',
    "complete --command plumb --current-token --cut-at-cursor",
    "Le mot de passe est hach\u00e9 \u2014 ne le copiez jamais. \U0001f510",
    "  color: #ff6600; border: 1px solid rgba(0, 0, 0, 0.1);",
    "Use the [REDACTED:github_token] placeholder the server returned.",
    # Prose, code and values around the widened rules.
    "the password field is required",
    "reset your password: see the docs",
    "Reset your password: follow the link in the email we sent.",
    "Step 2 \u2014 choose a password: anything works on the demo server",
    "password = getpass()",
    "password = getpass.getpass(prompt)",
    'password=os.environ["DB_PASSWORD"]',
    'if password == "":',
    "password = user_input",
    "password: str = field(repr=False)",
    '{"password": ["This field is required."]}',
    '{"password": "This field is required."}',
    'password: "Enter your password"',
    'password: "must be at least 12 characters long"',
    'raise ValueError("password: too short, try again")',
    "passwd:         files systemd",
    "passwd: compat",
    "Password: required",
    "commit 1b2c3d4e5f60718293a4b5c6d7e8f90123456789",
    "Merge 9fceb02 into 3f9a2b1",
    "trace 550e8400-e29b-41d4-a716-446655440000 and span 6ba7b810-9dad-11d1-80b4-00c04fd430c8",
    "https://example.com/search?q=plumb&page=2&sort=asc",
    "https://ci.example.com:8443/job/42/console",
    "ssh bob@build-01.internal",
    "scp ./dist.tar.gz deploy@10.0.0.7:/srv/app/",
    "https://bob@example.com/acme/repo.git",
    "Set the Authorization: Bearer header on every call.",
    "Authorization: Bearer scheme",
    "The API expects Authorization: Bearer tokens, not Basic.",
    "token_type: Bearer",
    'headers["Authorization"] = f"Bearer {token}"',
    "Google access tokens start with ya29. and expire after an hour.",
    "https://example.com/search?q=hello%20world%3Dyes",
    "MY_TOKEN_NAME=github_token_ci",
    "The GitHub prefix is ghp_\nand the rest is 36 random characters.",
    "line one ends with a word\nline two starts with one",
    "DB_PASSWORD=${DB_PASSWORD}&&make test",
    "?user=bob&page=2;sort=asc",
    # Around Azure, Twilio and sshpass: names, references and prose.
    "AccountName=acme;AccountKey=${AZURE_STORAGE_KEY};EndpointSuffix=core.windows.net",
    "AccountKey=<your-account-key>",
    "The AccountKey is rotated monthly; read AZURE_STORAGE_ACCOUNT_KEY from the vault.",
    "TWILIO_ACCOUNT_SID=AC" + "2f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c",
    "TASK" + "2f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c done",
    "sshpass -p is insecure, use -f instead",
    'sshpass -p "$SSHPASS" ssh deploy@host',
    "sshpass -f ~/.ssh/deploy.pw ssh deploy@host",
    "sshpass -e ssh deploy@host",
    "Never use sshpass -p with passwords in scripts.",
]


@pytest.mark.parametrize(("kind", "line", "secret"), SECRETS)
def test_secret_is_redacted_in_context(kind: str, line: str, secret: str) -> None:
    result = scrub(line)

    assert secret not in result.text
    assert result.text == line.replace(secret, f"[REDACTED:{kind}]")
    assert result.scrubbed == [{"kind": kind, "count": 1}]


@pytest.mark.parametrize("line", CLEAN)
def test_clean_line_survives_byte_for_byte(line: str) -> None:
    assert scrub(line) == ScrubResult(text=line, scrubbed=[])


def test_corpus_is_as_broad_as_promised() -> None:
    assert len(SECRETS) >= 105
    assert len({kind for kind, _, _ in SECRETS}) >= 25
    assert len(CLEAN) >= 120


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"export GITHUB_TOKEN={GITHUB_CLASSIC}", "export GITHUB_TOKEN=[REDACTED:github_token]"),
        ('"password": "Zq8!rT3#vW"', '"password": "[REDACTED:password_assignment]"'),
        ("password: s3cr3t!x", "password: [REDACTED:password_assignment]"),
        (
            "postgres://app:Tr0ub4dor-3x@db:5432/app",
            "postgres://app:[REDACTED:url_credentials]@db:5432/app",
        ),
        (
            f"Authorization: Bearer {OPAQUE_TOKEN}",
            "Authorization: Bearer [REDACTED:bearer_token]",
        ),
        ("set PASSWORD=abc123def.", "set PASSWORD=[REDACTED:password_assignment]."),
        ("DB_PASSWORD=Tr0ub4dor&3", "DB_PASSWORD=[REDACTED:password_assignment]"),
        (
            "https://example.com/login?password=abc123def&user=bob;lang=en",
            "https://example.com/login?password=[REDACTED:password_assignment]&user=bob;lang=en",
        ),
        ("auth(password=Tr0ub4dor&3)", "auth(password=[REDACTED:password_assignment])"),
        ('password: "my pass phrase"', 'password: "[REDACTED:password_assignment]"'),
        ("Authorization: Bearer abcdefghij", "Authorization: Bearer [REDACTED:bearer_token]"),
        ("https://user:pass@host", "https://user:[REDACTED:url_credentials]@host"),
        (f"MY_TOKEN_{GITHUB_CLASSIC}", "MY_TOKEN_[REDACTED:github_token]"),
        (f"a=%20{GITHUB_CLASSIC}%20b", "a=%20[REDACTED:github_token]%20b"),
    ],
)
def test_only_the_value_is_replaced_and_its_context_kept(line: str, expected: str) -> None:
    assert scrub(line).text == expected


def test_marker_format_is_exactly_redacted_colon_kind() -> None:
    result = scrub(f"token {GITHUB_CLASSIC}")

    assert result.text == "token [REDACTED:github_token]"
    assert re.fullmatch(r"token \[REDACTED:[a-z0-9_]+\]", result.text)


def test_several_kinds_in_one_body_are_counted_in_order_of_first_appearance() -> None:
    body = (
        "Deploy notes for tonight:\n"
        f"export GITHUB_TOKEN={GITHUB_CLASSIC}\n"
        "DATABASE_URL=postgres://app:Tr0ub4dor-3x@db.internal:5432/app\n"
        f'curl -H "Authorization: Bearer {JWT_HS256}" https://api.example.com/me\n'
        f"and the bot uses {GITHUB_APP} as well\n"
        f"stripe: {STRIPE_LIVE}\n"
    )

    result = scrub(body)

    assert result.scrubbed == [
        {"kind": "github_token", "count": 2},
        {"kind": "url_credentials", "count": 1},
        {"kind": "jwt", "count": 1},
        {"kind": "stripe_key", "count": 1},
    ]
    assert result.text == (
        "Deploy notes for tonight:\n"
        "export GITHUB_TOKEN=[REDACTED:github_token]\n"
        "DATABASE_URL=postgres://app:[REDACTED:url_credentials]@db.internal:5432/app\n"
        'curl -H "Authorization: Bearer [REDACTED:jwt]" https://api.example.com/me\n'
        "and the bot uses [REDACTED:github_token] as well\n"
        "stripe: [REDACTED:stripe_key]\n"
    )


def test_overlapping_rules_redact_once_with_the_most_specific_kind() -> None:
    assert scrub(f"Authorization: Bearer {JWT_RS256}").scrubbed == [{"kind": "jwt", "count": 1}]
    assert scrub(f"password={GITHUB_CLASSIC}").scrubbed == [{"kind": "github_token", "count": 1}]
    assert scrub(f"https://bot:{GITLAB_PAT}@gitlab.example.com").scrubbed == [
        {"kind": "gitlab_token", "count": 1}
    ]
    assert scrub(f"ANTHROPIC_API_KEY={ANTHROPIC_API}").scrubbed == [
        {"kind": "anthropic_key", "count": 1}
    ]


def test_scrubbing_is_idempotent() -> None:
    bodies = [line for _, line, _ in SECRETS] + CLEAN
    bodies.append("\n".join(line for _, line, _ in SECRETS))
    for body in bodies:
        once = scrub(body)
        twice = scrub(once.text)

        assert twice.text == once.text
        assert twice.scrubbed == []


@pytest.mark.parametrize("key", [RSA_KEY, OPENSSH_KEY, EC_KEY, PGP_KEY])
def test_private_key_block_is_removed_entirely(key: str) -> None:
    result = scrub(f"key:\n{key}\nthanks")

    assert result.text == "key:\n[REDACTED:private_key]\nthanks"
    for line in key.splitlines():
        if line:
            assert line not in result.text


def test_a_match_cut_short_by_a_more_specific_one_is_redacted_in_a_further_pass() -> None:
    # The password's bare value runs into the key's BEGIN line, so it loses the
    # overlap; once the key is a marker, what is left of it is a password again.
    body = f"password: Xy9abc{RSA_KEY}"

    result = scrub(body)

    assert result.text == "password: [REDACTED:password_assignment][REDACTED:private_key]"
    assert result.scrubbed == [
        {"kind": "password_assignment", "count": 1},
        {"kind": "private_key", "count": 1},
    ]
    assert scrub(result.text) == ScrubResult(text=result.text, scrubbed=[])


def test_scrubbing_random_mixes_of_secret_fragments_is_idempotent() -> None:
    fragments = [
        "password", "=", ": ", " ", '"', "'", "\n", "\n", "eyJ", ".", "@", "a:b@",
        DASHES + "BEGIN RSA PRIVATE KEY" + DASHES, DASHES + "END RSA PRIVATE KEY" + DASHES,
        "AAAA", "Authorization: ", "Bearer ", "https://", "-u ", "curl ", "mysql ", "-p",
        "--password ", "<password>", "</password>", "token", "Zq8!rT3", "[REDACTED:jwt]",
        GITHUB_CLASSIC, JWT_HS256, PLUMB_KEY, "[", "]", "**",
    ]  # fmt: skip
    for seed in range(60):
        rng = random.Random(seed)
        body = "".join(rng.choice(fragments) for _ in range(300))

        once = scrub(body)

        assert scrub(once.text) == ScrubResult(text=once.text, scrubbed=[]), seed


@pytest.mark.parametrize("column", range(4, 40))
def test_a_github_token_wrapped_at_any_column_is_redacted_whole(column: int) -> None:
    body = f"$ gh auth token\n{GITHUB_CLASSIC[:column]}\n{GITHUB_CLASSIC[column:]}\n$ exit"

    result = scrub(body)

    assert result.text == "$ gh auth token\n[REDACTED:github_token]\n$ exit"
    assert result.scrubbed == [{"kind": "github_token", "count": 1}]


# (kind, token, columns): wrapped at each of these columns, the token is redacted whole.
# Fixed-length formats join at any column; variable-length ones while the first
# line alone is shorter than their shortest form (longer ones keep their first line
# redacted on its own).
WRAPPED_TOKENS = [
    ("github_token", GITHUB_FINE_GRAINED, range(11, 93)),
    ("plumb_project_key", PLUMB_KEY, range(10, 62)),
    ("plumb_session_token", PLUMB_TOKEN, range(10, 62)),
    ("google_api_key", GOOGLE_MAPS, range(4, 39)),
    ("npm_token", NPM, range(4, 40)),
    ("huggingface_token", HUGGING_FACE, range(3, 37)),
    ("sendgrid_key", SENDGRID, range(3, 69)),
    ("aws_access_key_id", AWS_KEY_ID, range(4, 20)),
    ("gitlab_token", GITLAB_PAT, range(6, 26)),
    ("jwt", JWT_HS256, range(3, JWT_HS256.rindex(".") + 10)),
    ("openai_key", OPENAI_LEGACY, range(3, 23)),
    ("anthropic_key", ANTHROPIC_API, range(7, 27)),
    ("slack_token", SLACK_BOT, range(5, 15)),
    ("stripe_key", STRIPE_LIVE, range(8, 28)),
    ("google_oauth_token", GOOGLE_ACCESS_TOKEN, range(5, 25)),
    ("pypi_token", PYPI, range(8, 58)),
]


@pytest.mark.parametrize(
    ("kind", "token", "columns"), WRAPPED_TOKENS, ids=[kind for kind, _, _ in WRAPPED_TOKENS]
)
def test_a_token_wrapped_before_its_shortest_form_ends_is_redacted_whole(
    kind: str, token: str, columns: range
) -> None:
    for column in columns:
        body = f"pasted:\n{token[:column]}\n{token[column:]}\nthanks"

        result = scrub(body)

        assert result.text == f"pasted:\n[REDACTED:{kind}]\nthanks", column
        assert result.scrubbed == [{"kind": kind, "count": 1}], column


def test_a_token_that_ends_its_line_does_not_swallow_the_next_line() -> None:
    body = f"export GITHUB_TOKEN={GITHUB_CLASSIC}\nexport NEXT=abc123\n{JWT_HS256}\nDone9 today"

    result = scrub(body)

    assert result.text == (
        "export GITHUB_TOKEN=[REDACTED:github_token]\nexport NEXT=abc123\n"
        "[REDACTED:jwt]\nDone9 today"
    )


def test_half_a_token_at_the_end_of_a_line_is_joined_only_if_the_whole_is_a_token() -> None:
    # 20 characters after ghp_ and 5 on the next line are no GitHub token.
    body = f"{GITHUB_CLASSIC[:24]}\nabcde and more"

    assert scrub(body) == ScrubResult(text=body, scrubbed=[])


def test_private_key_pasted_without_its_end_line_loses_every_body_line() -> None:
    truncated = "\n".join(RSA_KEY.splitlines()[:-1])

    result = scrub(f"{truncated}\n\nIs this the right key?")

    assert result.text == "[REDACTED:private_key]\n\nIs this the right key?"


def test_unicode_around_a_secret_is_preserved_exactly() -> None:
    body = f"Ключ: «{GITHUB_CLASSIC}» — merci 🙏\u200b\n日本語 password: «не тот»"

    result = scrub(body)

    assert (
        result.text == "Ключ: «[REDACTED:github_token]» — merci 🙏\u200b\n日本語 password: «не тот»"
    )


def test_empty_body_is_returned_unchanged() -> None:
    assert scrub("") == ScrubResult(text="", scrubbed=[])


def test_generated_plumb_credentials_are_always_redacted() -> None:
    # token_urlsafe bodies may start or end with "-" or "_"; a few hundred draws cover that.
    for _ in range(200):
        key = credentials.generate(credentials.PROJECT_KEY).raw
        token = credentials.generate(credentials.SESSION_TOKEN).raw

        result = scrub(f"key={key}, token {token}.")

        assert result.text == (
            "key=[REDACTED:plumb_project_key], token [REDACTED:plumb_session_token]."
        )


@pytest.mark.parametrize(
    "body",
    [
        "a" * 16384,
        "=" * 16384,
        "eyJ" * 5461,
        "eyJa." * 3276,
        "-----BEGIN" * 1638,
        "-----BEGIN RSA PRIVATE KEY-----\n" * 512,
        "-----BEGIN PRIVATE KEY-----" + "A" * 16000,
        "password=" * 1820,
        "password: str = " * 1024,
        "sk-" * 5461,
        "https://a:" * 1638,
        "Authorization: Bearer " * 744,
        "curl -u a:" * 1638,
        "a@" * 8192,
        ":" * 16384,
        "tokenghp_" * 1820,
        ("aghp_" + "a1" * 20 + "_") * 350,
        "xeyJaaaaa." * 1638,
        "1xoxb-" * 2730,
        ("AKIA" + "A" * 16 + " " + "Aa1/" * 9) * 290,
        ("AKIA" + "B" * 16 + "\n") * 780,
        "AccountKey=" * 1489,
        "accountkey " + "A1a+" * 4093,
        "sshpass -v" * 1638,
        "sshpass -p " * 1489,
        "\uff47\uff48\uff50\uff3f" * 1365,
        "a\u200b" * 4096,
        "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44\uff1d" * 606,
        ("\U0001f468\u200d" + "\ufe0f") * 1638,
        (GITHUB_CLASSIC + STRIPE_LIVE + GITLAB_PAT + JWT_HS256 + HUGGING_FACE) * 54,
        "xoxb-" * 3276,
        "eyJhbGci.eyJzdWIi.T8u5mM9sZZ" * 585,
        ("ghp_" + "a1" * 17 + "b") * 420,
        (GITHUB_CLASSIC + "hf_") * 381,
        ("x" + AWS_KEY_ID + "sk-" + "Ab1" * 7) * 358,
    ],
    ids=lambda body: repr(body[:12]),
)
def test_adversarial_16_kb_bodies_are_scanned(body: str) -> None:
    # No timing assertion: a catastrophic pattern would hang here, not fail.
    result = scrub(body)

    assert scrub(result.text).text == result.text
