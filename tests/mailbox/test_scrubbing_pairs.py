"""Secret scrubbing (SPEC 3.5): an AWS secret access key pasted next to its key id.

Without its name (``aws_secret_access_key = ...``) a secret key is 40 base64
characters, which could be anything; next to an access key id it is the other
half of a credential: aws configure's prompts, the console's CSV,
``AKIA...:secret``. Both halves go. Hashes and words near an id stay.
"""

import pytest

from common.scrubbing import ScrubResult, scrub
from tests.mailbox.test_scrubbing import (
    AWS_KEY_ID,
    AWS_SECRET_1,
    AWS_SECRET_2,
    AWS_STS_KEY_ID,
)

ID = "[REDACTED:aws_access_key_id]"
SECRET = "[REDACTED:aws_secret_access_key]"

# (body, what is stored)
PAIRS = [
    (
        f"$ aws configure\nAWS Access Key ID [None]: {AWS_KEY_ID}\n"
        f"AWS Secret Access Key [None]: {AWS_SECRET_1}\nDefault region name [None]: us-east-1",
        f"$ aws configure\nAWS Access Key ID [None]: {ID}\n"
        f"AWS Secret Access Key [None]: {SECRET}\nDefault region name [None]: us-east-1",
    ),
    (
        f"Access key ID,Secret access key\r\n{AWS_KEY_ID},{AWS_SECRET_1}\r\n",
        f"Access key ID,Secret access key\r\n{ID},{SECRET}\r\n",
    ),
    (f"{AWS_KEY_ID}:{AWS_SECRET_2}", f"{ID}:{SECRET}"),
    (f"id {AWS_STS_KEY_ID} secret {AWS_SECRET_2}", f"id {ID} secret {SECRET}"),
    (f"| {AWS_KEY_ID} | `{AWS_SECRET_1}` |", f"| {ID} | `{SECRET}` |"),
    (f'{{"id": "{AWS_KEY_ID}", "key": "{AWS_SECRET_1}"}}', f'{{"id": "{ID}", "key": "{SECRET}"}}'),
    # Two pairs: each id takes the key after it.
    (
        f"{AWS_KEY_ID} {AWS_SECRET_1}\n{AWS_STS_KEY_ID} {AWS_SECRET_2}",
        f"{ID} {SECRET}\n{ID} {SECRET}",
    ),
    # The id is a dummy, the key is not.
    (f"AKIA{'IOSFODNN7EXAMPLE'} {AWS_SECRET_1}", f"AKIA{'IOSFODNN7EXAMPLE'} {SECRET}"),
    # Only the run of 40 that mixes cases with a digit is the key; the hash stays.
    (
        f"{AWS_KEY_ID} (commit 9fceb02d0ae598e95dc970b74767f19372d61af8) {AWS_SECRET_1}",
        f"{ID} (commit 9fceb02d0ae598e95dc970b74767f19372d61af8) {SECRET}",
    ),
    # Too far from the id: a blank line, or past the next line.
    (f"{AWS_KEY_ID}\n\n{AWS_SECRET_1}", f"{ID}\n\n{AWS_SECRET_1}"),
    (f"{AWS_KEY_ID}\nnext\nthen\n{AWS_SECRET_1}", f"{ID}\nnext\nthen\n{AWS_SECRET_1}"),
]

# Near an id that is a documentation dummy, nothing here is a secret.
PAIR_NEAR_MISSES = [
    "AKIA" + "IOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AKIA" + "IOSFODNN7EXAMPLE, fixed in 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "AKIA" + "IOSFODNN7EXAMPLE lives in credentialsProviderChainForTheDefaultPro",
    "AKIA" + "IOSFODNN7EXAMPLE: SGVsbG8sIHdvcmxkISBUaGlzIGlzIGEgdGVzdC4gSGVsbG8sIHdvcmxkIQ==",
]


@pytest.mark.parametrize(("body", "stored"), PAIRS)
def test_a_secret_key_next_to_its_key_id_is_redacted(body: str, stored: str) -> None:
    assert scrub(body).text == stored


@pytest.mark.parametrize("body", PAIR_NEAR_MISSES)
def test_base64_hashes_and_names_near_a_dummy_key_id_survive(body: str) -> None:
    assert scrub(body) == ScrubResult(text=body, scrubbed=[])


def test_both_halves_are_reported_once_each() -> None:
    result = scrub(f"{AWS_KEY_ID}:{AWS_SECRET_1}")

    assert result.scrubbed == [
        {"kind": "aws_access_key_id", "count": 1},
        {"kind": "aws_secret_access_key", "count": 1},
    ]
