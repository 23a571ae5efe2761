"""Search beside concurrent writers, on both databases: a message is found by every
search that starts after its send returned, however the sends and the searches (and,
on SQLite, the index's queue catching up) interleave (SPEC §9)."""

from __future__ import annotations

import queue
import threading
import time

import pytest
from django.db import connection

from rooms import services
from rooms.selectors.search import search_for_session
from tests.factories import SessionFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db(transaction=True)

SENDS_PER_WRITER = 25
WRITERS = 2
DEADLINE = 60  # seconds for the whole test, at most


def test_every_message_is_found_by_a_search_that_starts_after_its_send_returned():
    workspace = WorkspaceFactory(slug="races")
    writers = [SessionFactory(workspace=workspace, name=f"writer-{i}") for i in range(WRITERS)]
    reader = SessionFactory(workspace=workspace, name="reader")
    services.room_create(reader, slug="busy")
    for writer in writers:
        services.room_join(writer, "busy")
    sent: queue.Queue[str] = queue.Queue()
    errors: list[BaseException] = []
    stop = time.monotonic() + DEADLINE

    def write(session, n: int) -> None:
        try:
            for i in range(SENDS_PER_WRITER):
                word = f"w{n}x{i}marker"
                services.message_send(session, "busy", body=f"status {word} done")
                sent.put(word)  # its send has returned
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(w, n)) for n, w in enumerate(writers)]
    for thread in threads:
        thread.start()
    missed, checked = [], 0
    while checked < WRITERS * SENDS_PER_WRITER and time.monotonic() < stop and not errors:
        try:
            word = sent.get(timeout=1)
        except queue.Empty:
            continue
        page = search_for_session(reader, q=word)
        checked += 1
        if [hit.body for hit in page.hits] != [f"status {word} done"]:
            missed.append(word)
    for thread in threads:
        thread.join(timeout=DEADLINE)

    assert errors == []
    assert checked == WRITERS * SENDS_PER_WRITER
    assert missed == []
