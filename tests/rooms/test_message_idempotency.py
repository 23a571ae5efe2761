"""Idempotency keys of send_message: a retry replays the original, a changed request is
refused, and keys belong to one author in one room (SPEC §4.2 step 2).

One message per key under real concurrency is in test_room_guarantees.py.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from rooms.models import Message, Room
from tests.conftest import assert_error
from tests.rooms.messaging import SEND_FIELDS, create_room, post, send, stored_state

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_no_rate_limits")]


def test_a_retry_with_the_same_key_and_body_replays_the_original_after_the_room_moved_on(
    alice, bob, general
):
    original = send(alice, body="deploying 812", idempotency_key="deploy-812")
    post(bob, "ok")
    post(bob, "go ahead")
    before = stored_state()

    retry = send(alice, body="deploying 812", idempotency_key="deploy-812")

    assert retry.status_code == 200
    body = retry.json()
    assert set(body) == SEND_FIELDS
    assert body["replayed"] is True
    assert body["message"] == original.json()["message"]
    assert body["latest_seq"] == 5
    assert body["notes"] == []
    assert stored_state() == before


def test_a_replay_reports_what_the_original_send_reported(alice, bob, general):
    post(bob, "one")
    post(bob, "two")
    original = send(alice, body="@bob @nobdy noted", idempotency_key="noted")
    post(bob, "three")

    retry = send(alice, body="@bob @nobdy noted", idempotency_key="noted")

    assert original.json()["unseen_before_send"] == 2
    assert retry.json()["unseen_before_send"] == 2
    for field in ("mentions", "unresolved_mentions", "mention_warnings"):
        assert retry.json()[field] == original.json()[field]
    assert retry.json()["unresolved_mentions"] == ["@nobdy"]


def test_a_retry_replays_even_after_the_room_was_locked(alice, general):
    original = send(alice, body="last words", idempotency_key="last")
    Room.objects.filter(pk=general.pk).update(locked_at=timezone.now())

    retry = send(alice, body="last words", idempotency_key="last")

    assert retry.status_code == 200
    assert retry.json()["replayed"] is True
    assert retry.json()["message"]["id"] == original.json()["message"]["id"]


def test_the_same_key_with_a_different_body_is_refused_with_idempotency_key_reused(alice, general):
    post(alice, "deploying 812", idempotency_key="deploy")
    before = stored_state()

    response = send(alice, body="deploying 813", idempotency_key="deploy")

    assert_error(response, 409, "idempotency_key_reused")
    assert stored_state() == before


def test_the_same_key_with_a_different_reply_to_is_refused_with_idempotency_key_reused(
    alice, general
):
    parent = post(alice, "the plan")
    post(alice, "agreed", idempotency_key="ack")
    before = stored_state()

    response = send(alice, body="agreed", idempotency_key="ack", reply_to=parent["id"])

    assert_error(response, 409, "idempotency_key_reused")
    assert stored_state() == before


def test_another_author_may_use_the_same_key_in_the_same_room(alice, bob, general):
    mine = post(alice, "same words", idempotency_key="shared")

    response = send(bob, body="same words", idempotency_key="shared")

    assert response.status_code == 201
    assert response.json()["replayed"] is False
    assert response.json()["message"]["id"] != mine["id"]
    assert Message.objects.filter(idempotency_key="shared").count() == 2


def test_the_same_author_may_use_the_same_key_in_another_room(alice, general):
    mine = post(alice, "same words", idempotency_key="shared")
    assert create_room(alice, "elsewhere").status_code == 201

    response = send(alice, "elsewhere", body="same words", idempotency_key="shared")

    assert response.status_code == 201
    assert response.json()["replayed"] is False
    assert response.json()["message"]["id"] != mine["id"]
    assert response.json()["message"]["room"] == "elsewhere"
