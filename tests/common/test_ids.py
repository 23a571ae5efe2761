"""Public ids: a prefix and 24 base32 characters, each as likely as any other."""

from __future__ import annotations

import base64
import collections
import re

from common.ids import ALPHABET, BASE32_OF_BYTE, LENGTH, new_public_id


def test_an_id_is_its_prefix_and_base32_characters():
    made = {new_public_id("msg") for _ in range(1000)}

    assert len(made) == 1000
    for public_id in made:
        assert re.fullmatch(rf"msg_[a-z2-7]{{{LENGTH}}}", public_id), public_id


def test_the_characters_are_base32s_and_every_byte_names_one_as_often_as_any_other():
    # RFC 4648's alphabet, base64.b32encode's.
    assert set(base64.b32encode(bytes(range(256))).decode().strip("=")) == set(ALPHABET.upper())
    counts = collections.Counter(BASE32_OF_BYTE)

    assert sorted(chr(c) for c in counts) == sorted(ALPHABET)
    assert set(counts.values()) == {256 // 32}


def test_an_id_holds_as_many_random_bits_as_fifteen_random_bytes():
    assert LENGTH * 5 == 15 * 8  # base64.b32encode of 15 random bytes
