"""Wake-ups (common/wake/): subscribe first, publish at commit, wake only the topics named.

Every wait below is bounded (``PROMPT``) and each test asserts what woke, so
a test that passed only because time ran out would fail on ``woken``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, transaction
from prometheus_client import REGISTRY

from common import pause, wake
from tests.hostwake import busy_listener

PROMPT = 10.0


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    assert wake.subscriptions() == 0


def test_a_publication_wakes_the_subscriptions_of_its_topics_only():
    mine, other = wake.subscribe(["r:1", "n:2"]), wake.subscribe(["r:3"])
    try:
        wake.deliver(["n:2", "s:9"])

        assert mine.woken
        assert not other.woken
        assert mine.wait(0)
    finally:
        wake.unsubscribe(mine)
        wake.unsubscribe(other)


def test_a_marked_publication_spares_the_subscriptions_of_its_mark_only():
    own, older, plain = (
        wake.subscribe(["p:1"], mark="new"),
        wake.subscribe(["p:1"], mark="old"),
        wake.subscribe(["p:1"]),
    )
    try:
        wake.deliver(["p:1#new"])

        assert not own.woken
        assert older.woken
        assert plain.woken
    finally:
        for s in (own, older, plain):
            wake.unsubscribe(s)


def test_a_numbered_publication_wakes_the_subscriptions_whose_ceiling_reaches_it():
    below, at, above, plain = (
        wake.subscribe(["w:1@811"]),
        wake.subscribe(["w:1@812"]),
        wake.subscribe(["w:1@900", "n:4"]),
        wake.subscribe(["w:1"]),
    )
    try:
        wake.deliver(["w:1@812"])

        assert [s.woken for s in (below, at, above, plain)] == [False, True, True, True]
        wake.deliver(["w:1"])  # not numbered: every subscription to the topic
        assert below.woken
    finally:
        for s in (below, at, above, plain):
            wake.unsubscribe(s)


def test_wake_all_wakes_every_subscription():
    subs = [wake.subscribe([f"r:{i}"]) for i in range(3)]
    try:
        wake.deliver([wake.WAKE_ALL])
        assert all(s.woken for s in subs)
    finally:
        for s in subs:
            wake.unsubscribe(s)


@transaction.atomic
def publish_then_fail(topic: str) -> None:
    wake.publish([topic])
    raise RuntimeError


@pytest.mark.django_db(transaction=True)
def test_a_publication_in_a_transaction_wakes_at_commit_and_never_on_rollback():
    with wake.subscribed(["r:1"]) as committed, wake.subscribed(["r:2"]) as rolled_back:
        with transaction.atomic():
            wake.publish(["r:1"])
            assert not committed.woken  # the rows are not visible yet
        assert committed.woken

        with pytest.raises(RuntimeError):
            publish_then_fail("r:2")
        assert not rolled_back.woken


def test_a_coroutine_waits_holding_no_thread_and_a_thread_wakes_it():
    async def scenario() -> tuple[bool, float]:
        with wake.subscribed(["n:5"]) as subscription:
            threads_before = threading.active_count()
            waiting = asyncio.ensure_future(subscription.wait_async(PROMPT))
            await asyncio.sleep(0)
            assert threading.active_count() == threads_before
            started = time.monotonic()
            threading.Thread(target=wake.deliver, args=(["n:5"],)).start()
            woken = await waiting
            return woken, time.monotonic() - started

    woken, took = asyncio.run(scenario())

    assert woken
    assert took < PROMPT


def test_a_wake_before_the_wait_is_not_lost():
    async def scenario() -> bool:
        with wake.subscribed(["n:5"]) as subscription:
            wake.deliver(["n:5"])  # between the look at the database and the wait
            return await subscription.wait_async(PROMPT)

    assert asyncio.run(scenario())


def test_a_wait_that_nothing_wakes_ends_at_its_timeout_unwoken():
    async def scenario() -> bool:
        with wake.subscribed(["n:5"]) as subscription:
            return await subscription.wait_async(0.05)

    assert asyncio.run(scenario()) is False


# --- another process or host -------------------------------------------------------------


def publish_elsewhere(topic: str) -> None:
    """Publish ``topic`` the way another server process would, at a commit of its own."""
    if connection.vendor == "postgresql":
        import psycopg

        params = {**wake.postgres._listen_params("default"), "application_name": "plumb-test"}
        with psycopg.connect(**params) as other:
            # As publish sends them: one NOTIFY for each channel its topics go out on.
            for channel, each in wake.postgres.channels(topic.split()).items():
                other.execute("SELECT pg_notify(%s, %s)", [channel, " ".join(each)])
        return
    code = (
        f"import django; django.setup();from common import wake;wake.host.send({topic!r}.split())"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "plumb_site.settings"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


@pytest.mark.django_db(transaction=True)
def test_a_listener_wakes_its_subscriptions_for_a_publication_from_another_process():
    async def scenario() -> bool:
        listening = wake.listen()
        try:
            if connection.vendor == "postgresql":
                await asyncio.sleep(0.5)  # the LISTEN connection is opening
            with wake.subscribed(["r:77"]) as subscription:
                await asyncio.to_thread(publish_elsewhere, "r:77")
                return await subscription.wait_async(PROMPT)
        finally:
            await listening.close()

    assert asyncio.run(scenario())


@pytest.mark.django_db(transaction=True)
def test_a_listener_does_not_echo_a_marked_publication_to_its_own_mark():
    """On PostgreSQL a process hears its own NOTIFY: a waiter is not woken by its own."""

    async def scenario() -> tuple[bool, bool]:
        listening = wake.listen()
        try:
            if connection.vendor == "postgresql":
                await asyncio.sleep(0.5)  # the LISTEN connection is opening
            with (
                wake.subscribed(["p:7"], mark="mine") as own,
                wake.subscribed(["r:78"]) as after,
            ):
                # One publication: delivered at once, so when ``after`` wakes,
                # ``own`` has seen it too.
                await asyncio.to_thread(publish_elsewhere, "p:7#mine r:78")
                return await after.wait_async(PROMPT), own.woken
        finally:
            await listening.close()

    assert asyncio.run(scenario()) == (True, False)


def test_an_announcement_that_fails_subscribes_nothing_and_the_next_announces_again(
    sparse_kind,
):
    calls: list[tuple[str, bool]] = []

    def announce(kind: str, held: bool) -> None:
        calls.append((kind, held))
        if len(calls) == 1:
            raise OSError("no room for the file")

    wake.topics.announcing(announce)
    try:
        with pytest.raises(OSError, match="no room"):
            wake.subscribe(["s:1"])
        with wake.subscribed(["s:2"]):
            pass
    finally:
        wake.topics.announcing(None)

    assert calls == [("s:", True), ("s:", True), ("s:", False)]


def test_a_socket_left_by_a_dead_process_is_removed_with_what_it_announced(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    directory = wake.wake_dir()
    directory.mkdir()
    stale = directory / "999999-dead.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(stale))
    sock.close()  # the file stays; nobody reads it any more
    (directory / "999999-dead.sock~t:").touch()  # it waited on sent notes (sparse topics)

    wake.host.send(["n:1"])

    assert list(directory.iterdir()) == []


# --- bursts between the processes of one host (issue 23, item 5) --------------------------


def queue_length() -> int:
    """How many datagrams the kernel queues for one socket (``net.unix.max_dgram_qlen``)."""
    try:
        return int(Path("/proc/sys/net/unix/max_dgram_qlen").read_text())
    except (OSError, ValueError):
        return 10


def host_publish(topics: list[str]) -> None:
    """One commit's publication to the other listeners of this host, as ``publish`` sends it."""
    wake.host.send(topics)


def receive_until(sock: socket.socket, expected: set[str]) -> list[list[str]]:
    """The datagrams read until all of ``expected`` came, or nothing more did for ``PROMPT``."""
    datagrams: list[list[str]] = []
    while not expected <= {topic for datagram in datagrams for topic in datagram}:
        try:
            datagrams.append(sock.recv(65536).decode().split(" "))
        except TimeoutError:
            break
    return datagrams


def test_a_burst_past_a_full_queue_is_held_back_and_sent_in_one_datagram_once_read(
    tmp_path, settings
):
    settings.VAR_DIR = tmp_path
    listener = busy_listener(wake.wake_dir())
    topics = [f"n:{i}" for i in range(3 * queue_length() + 3)]
    try:
        for topic in topics:  # one commit each, while the listener reads nothing
            host_publish([topic])
        datagrams = receive_until(listener, set(topics))
    finally:
        listener.close()

    received = [topic for datagram in datagrams for topic in datagram]
    assert sorted(received) == sorted(topics)  # each once, none lost
    # What the queue took went one by one; the rest waited and went together.
    assert [len(datagram) for datagram in datagrams[:-1]] == [1] * (len(datagrams) - 1)
    assert len(datagrams) < len(topics)


def test_a_publication_too_large_for_one_datagram_wakes_everything(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    listener = busy_listener(wake.wake_dir())
    topics = [f"n:{i}" for i in range(12_000)]  # some 90 kB
    try:
        host_publish(topics)
        datagrams = receive_until(listener, {wake.WAKE_ALL})
    finally:
        listener.close()

    assert datagrams == [[wake.WAKE_ALL]]


SEND_BURST = """
import django, sys
django.setup()
from common import wake
for topic in sys.argv[1:]:
    wake.publish([topic])  # outside a transaction: sent at once, one commit each
print("sent", flush=True)
"""


def test_a_listener_busy_through_another_processs_burst_is_woken_for_all_of_it(tmp_path, settings):
    """The sending process publishes while this process's event loop is held (as
    a busy server's is), then exits: what the listener's queue could not take
    is still delivered, all of it, once the loop reads again."""
    settings.VAR_DIR = tmp_path
    topics = [f"n:{i}" for i in range(3 * queue_length() + 3)]
    # SQLite, whatever this run's database: on PostgreSQL publications go by NOTIFY.
    env = {
        **{k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
        "DJANGO_SETTINGS_MODULE": "plumb_site.settings",
        "PLUMB_VAR_DIR": str(tmp_path),
    }

    async def scenario() -> tuple[list[str], int]:
        listener = wake.host.Listener(asyncio.get_running_loop())
        subscriptions = [wake.subscribe([topic]) for topic in topics]
        try:
            sender = subprocess.Popen(
                [sys.executable, "-c", SEND_BURST, *topics],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            # Read on the loop's thread: the listener reads nothing until it returns.
            assert sender.stdout.readline() == "sent\n"
            deadline = time.monotonic() + PROMPT
            while not all(s.woken for s in subscriptions) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            exit_code = await asyncio.to_thread(sender.wait, 60)
            return [s.topics for s in subscriptions if not s.woken], exit_code
        finally:
            for subscription in subscriptions:
                wake.unsubscribe(subscription)
            listener.close()

    asleep, exit_code = asyncio.run(scenario())

    assert asleep == []
    assert exit_code == 0


# --- sparse topics: sent only to the processes that wait on their kind (issue 25) ----------


@pytest.fixture
def sparse_kind():
    """``s:`` made sparse for one test."""
    wake.sparse("s:")
    yield "s:"
    wake.topics._sparse.discard("s:")


def test_a_sparse_topic_goes_only_to_listeners_whose_process_waits_on_its_kind(
    tmp_path, settings, sparse_kind
):
    settings.VAR_DIR = tmp_path
    listener = busy_listener(wake.wake_dir())
    announced = Path(f"{listener.getsockname()}~{sparse_kind}")
    try:
        host_publish(["s:1"])  # its process waits on no s: topic
        host_publish(["s:2", "n:2"])
        announced.touch()
        host_publish(["s:3"])
        announced.unlink()
        host_publish(["s:4", "n:4"])
        datagrams = receive_until(listener, {"n:2", "s:3", "n:4"})
    finally:
        listener.close()

    # Datagrams arrive in order: had s:1 or s:4 been sent, it would be read here.
    assert datagrams == [["n:2"], ["s:3"], ["n:4"]]


def test_a_process_announces_a_sparse_kind_from_before_its_first_subscription_to_after_its_last(
    tmp_path, settings, sparse_kind
):
    settings.VAR_DIR = tmp_path
    seen_at_subscribing: list[bool] = []

    async def scenario() -> list[bool]:
        first = wake.subscribe(["s:1"])  # before the listener: announced when it starts
        listener = wake.host.Listener(asyncio.get_running_loop())
        announced = Path(f"{listener.path}~{sparse_kind}")
        # What the process says at the moment each subscription is added.
        adding = wake.topics._add

        def add(subscription):
            seen_at_subscribing.append(announced.exists())
            adding(subscription)

        wake.topics._add = add
        try:
            states = [announced.exists()]
            second = wake.subscribe(["s:2", "n:2"])
            other = wake.subscribe(["n:3"])
            wake.unsubscribe(first)
            states.append(announced.exists())
            wake.unsubscribe(second)
            wake.unsubscribe(second)  # twice: counted once
            states.append(announced.exists())
            again = wake.subscribe(["s:4"])
            states.append(announced.exists())
            listener.close()
            states.append(announced.exists())  # a stopped listener says nothing
            wake.unsubscribe(again)
            wake.unsubscribe(other)
            return states
        finally:
            wake.topics._add = adding

    assert asyncio.run(scenario()) == [True, True, False, True, False]
    assert seen_at_subscribing == [True, True, True]  # s:2, n:3 (announced still), s:4
    assert list(wake.wake_dir().iterdir()) == []


# --- PostgreSQL: a LISTEN connection that dies, loudly or silently (issue 23, item 10) ------

HEARD = "plumb_wake_listen_heard_timestamp_seconds"


def tcp_params(params: dict) -> dict:
    """The connection parameters, which must reach PostgreSQL over TCP (as the
    throwaway cluster of ``scripts/with-postgres`` is reached)."""
    host = str(params.get("host") or "")
    assert host, "these tests need PostgreSQL over TCP, not a Unix socket"
    assert not host.startswith("/"), "these tests need PostgreSQL over TCP, not a Unix socket"
    return params


def listen_backends(params: dict) -> dict[int, int]:
    """{backend pid: client port} of the LISTEN connections (named, or still at LISTEN)."""
    import psycopg

    with psycopg.connect(**params) as other:
        rows = other.execute(
            "SELECT pid, client_port FROM pg_stat_activity"
            " WHERE datname = current_database() AND (application_name = %s OR query = %s)",
            ["plumb-wake", f"LISTEN {wake.CHANNEL}"],
        ).fetchall()
    return dict(rows)


async def until(condition, what: str) -> None:
    """Wait, on the loop, until ``condition()`` (run in a thread) holds; fail after PROMPT."""
    deadline = time.monotonic() + PROMPT
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, f"{what} did not happen within {PROMPT} s"
        await asyncio.sleep(0.05)


def own_socket_on_port(port: int) -> socket.socket | None:
    """This process's TCP socket whose local port is ``port`` (a duplicate: close it)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue  # not a socket
        if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.getsockname()[1] == port:
            return sock
        sock.close()
    return None


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_the_listen_connection_sends_tcp_keepalives():
    """Without them a half-open connection (a host or NAT gone) is noticed after hours."""
    params = tcp_params(
        {**wake.postgres._listen_params("default"), "application_name": "plumb-test"}
    )

    async def scenario() -> dict[str, int]:
        await until(lambda: not listen_backends(params), "earlier tests' listeners gone")
        listening = wake.listen()
        try:
            await until(lambda: listen_backends(params), "LISTEN")
            (port,) = (await asyncio.to_thread(listen_backends, params)).values()
            sock = own_socket_on_port(port)
            assert sock is not None
            with sock:
                return {
                    option: sock.getsockopt(level, getattr(socket, option))
                    for level, option in (
                        (socket.SOL_SOCKET, "SO_KEEPALIVE"),
                        (socket.IPPROTO_TCP, "TCP_KEEPIDLE"),
                        (socket.IPPROTO_TCP, "TCP_KEEPINTVL"),
                        (socket.IPPROTO_TCP, "TCP_KEEPCNT"),
                    )
                }
        finally:
            await listening.close()

    assert asyncio.run(scenario()) == {
        "SO_KEEPALIVE": 1,
        "TCP_KEEPIDLE": 30,
        "TCP_KEEPINTVL": 10,
        "TCP_KEEPCNT": 3,
    }


class Blackhole:
    """A TCP relay to PostgreSQL whose connections can go silent.

    ``silence()`` makes every connection open now swallow what either side
    sends, closing nothing: what a vanished host or NAT does to a TCP
    connection, which neither end hears of. Connections opened later pass.
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.links: list[tuple[socket.socket, socket.socket, threading.Event]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.target)
            silent = threading.Event()
            self.links.append((client, upstream, silent))
            for source, sink in ((client, upstream), (upstream, client)):
                args = (source, sink, silent)
                threading.Thread(target=self._relay, args=args, daemon=True).start()

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket, silent: threading.Event) -> None:
        while True:
            try:
                data = source.recv(65536)
                if silent.is_set():
                    continue  # swallowed, and a close with it
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
            except OSError:
                return

    def silence(self) -> None:
        for _, _, silent in self.links:
            silent.set()

    def close(self) -> None:
        self.server.close()
        for sock in [sock for client, upstream, _ in self.links for sock in (client, upstream)]:
            # shutdown, not only close: a relay thread blocked in recv() holds the socket open.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@pytest.mark.postgresql
@pytest.mark.parametrize("death", ["silent", "terminated"])
@pytest.mark.django_db(transaction=True)
def test_a_dead_listen_connection_is_replaced_within_the_check_and_the_metric_says_so(
    monkeypatch, death
):
    """``silent``: the connection stops carrying anything and nobody closes it (a
    half-open connection); ``terminated``: its backend is killed
    (``pg_terminate_backend``). Either way a new connection listens within the
    periodic check, a publication wakes its subscription again, and
    plumb_wake_listen_heard_timestamp_seconds moves past the death."""
    import psycopg

    listener_params = wake.postgres._listen_params("default")
    params = tcp_params({**listener_params, "application_name": "plumb-test"})
    relay = Blackhole(params["host"], int(params.get("port", 5432)))
    monkeypatch.setattr(
        wake.postgres, "_listen_params", lambda using: {**listener_params, "port": relay.port}
    )
    monkeypatch.setattr(wake.postgres, "CHECK_INTERVAL", 0.2)
    monkeypatch.setattr(wake.postgres, "CHECK_TIMEOUT", 0.5)
    monkeypatch.setattr(wake.postgres, "RECONNECT_DELAY", 0.1)

    async def scenario() -> tuple[bool, float | None, float | None, float]:
        await until(lambda: not listen_backends(params), "earlier tests' listeners gone")
        listening = wake.listen()
        try:
            await until(lambda: listen_backends(params), "the first LISTEN")
            (first,) = await asyncio.to_thread(listen_backends, params)
            heard_before = REGISTRY.get_sample_value(HEARD)
            died_at = time.time()
            if death == "silent":
                relay.silence()
            else:
                with psycopg.connect(**params) as other:
                    other.execute("SELECT pg_terminate_backend(%s)", [first])
            await until(lambda: set(listen_backends(params)) - {first}, "a new LISTEN connection")
            with wake.subscribed(["r:81"]) as subscription:
                await asyncio.to_thread(publish_elsewhere, "r:81")
                woken = await subscription.wait_async(PROMPT)
            return woken, heard_before, REGISTRY.get_sample_value(HEARD), died_at
        finally:
            await listening.close()
            relay.close()

    woken, heard_before, heard_after, died_at = asyncio.run(scenario())

    assert woken
    assert heard_before is not None
    assert heard_before <= died_at <= heard_after


# --- sparse kinds on PostgreSQL: a channel each, listened on while waited on ----------------


class Hearing:
    """What this process's LISTEN connection hears (``postgres._heard``), and markers to wait for.

    Notifications reach a listener in the order of their commits, so once a
    marker published after a publication is heard, that publication has been
    heard too, or will never be.
    """

    def __init__(self, monkeypatch) -> None:
        self.payloads: list[str] = []
        heard = wake.postgres._heard

        def hearing(notify) -> None:
            self.payloads.append(notify.payload)
            heard(notify)

        monkeypatch.setattr(wake.postgres, "_heard", hearing)
        self.markers = 0

    async def mark(self) -> None:
        """Publish a topic of no sparse kind from elsewhere until it is heard.

        Again and again, as a first one may go out before the listener listens.
        """
        self.markers += 1
        marker = f"n:{900 + self.markers}"
        deadline = time.monotonic() + PROMPT
        while marker not in self.payloads:
            assert time.monotonic() < deadline, f"{marker} was not heard within {PROMPT} s"
            await asyncio.to_thread(publish_elsewhere, marker)
            for _ in range(25):
                if marker in self.payloads:
                    break
                await asyncio.sleep(0.02)

    def rooms(self) -> list[str]:
        return [p for p in self.payloads if p.startswith("r:")]


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_process_waiting_on_no_room_is_not_told_of_room_publications(monkeypatch):
    hearing = Hearing(monkeypatch)

    async def scenario() -> None:
        listening = wake.listen()
        try:
            await hearing.mark()  # listening on the common channel
            await asyncio.to_thread(publish_elsewhere, "r:90")
            await hearing.mark()
        finally:
            await listening.close()

    asyncio.run(scenario())

    assert "n:902" in hearing.payloads  # heard after r:90 would have been
    assert hearing.rooms() == []


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_process_hears_a_kind_while_it_waits_on_it_and_lets_go_after_the_linger(monkeypatch):
    monkeypatch.setattr(wake.postgres, "LINGER", 0.0)
    hearing = Hearing(monkeypatch)

    async def told(topic: str) -> bool:
        """Whether a publication of ``topic`` wakes a waiter while its kind is listened on."""
        with wake.subscribed([topic]) as first:
            # Woken once its process listens on rooms' channel (it looks again then).
            assert await first.wait_async(PROMPT)
            with wake.subscribed([topic]) as second:
                await asyncio.to_thread(publish_elsewhere, topic)
                return await second.wait_async(PROMPT)

    async def scenario() -> tuple[bool, bool]:
        listening = wake.listen()
        try:
            await hearing.mark()
            first = await told("r:91")
            # The last waiter gone and the linger over, rooms' channel is let go.
            deadline = time.monotonic() + PROMPT
            while True:
                heard = len(hearing.rooms())
                await asyncio.to_thread(publish_elsewhere, "r:92")
                await hearing.mark()
                if len(hearing.rooms()) == heard:
                    break
                assert time.monotonic() < deadline, "rooms' channel still heard"
            # Waited on again: listened on again.
            return first, await told("r:93")
        finally:
            await listening.close()

    assert asyncio.run(scenario()) == (True, True)
    assert "r:91" in hearing.payloads
    assert "r:93" in hearing.payloads


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_the_first_waiter_on_a_kind_looks_again_once_its_process_listens_on_it(monkeypatch):
    """The first waiter on rooms subscribes and looks while its process's LISTEN on
    rooms' channel is on its way: a send committed meanwhile is never told to this
    process. Here nothing is published at all; the waiter is woken all the same,
    once the LISTEN is answered, so that its next look finds such a send."""
    hearing = Hearing(monkeypatch)
    order: list[str] = []

    async def scenario() -> bool:
        listening = wake.listen()
        try:
            await hearing.mark()
            pause.set_hook("wake.kind_listen", lambda: order.append("listen"))
            with wake.subscribed(["r:94"]) as subscription:
                order.append("subscribed")
                woken = await subscription.wait_async(PROMPT)
                order.append("woken")
                return woken
        finally:
            pause.set_hook("wake.kind_listen", None)
            await listening.close()

    assert asyncio.run(scenario())
    assert order == ["subscribed", "listen", "woken"]
    assert hearing.rooms() == []


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_listener_that_connects_again_listens_again_on_the_kinds_waited_on(monkeypatch):
    import psycopg

    monkeypatch.setattr(wake.postgres, "RECONNECT_DELAY", 0.1)
    hearing = Hearing(monkeypatch)

    async def scenario() -> bool:
        listening = wake.listen()
        try:
            await hearing.mark()
            with wake.subscribed(["r:95"]) as held:
                assert await held.wait_async(PROMPT)  # rooms' channel listened on
                params = {**wake.postgres._listen_params("default"), "application_name": "x"}
                (first,) = await asyncio.to_thread(listen_backends, params)
                with psycopg.connect(**params) as other:
                    other.execute("SELECT pg_terminate_backend(%s)", [first])
                await hearing.mark()  # a new connection listens on the common channel
                # The kind stayed waited on throughout: only a LISTEN made at the
                # reconnection lets this publication through.
                with wake.subscribed(["r:95"]) as later:
                    await asyncio.to_thread(publish_elsewhere, "r:95")
                    return await later.wait_async(PROMPT)
        finally:
            await listening.close()

    assert asyncio.run(scenario())
    assert "r:95" in hearing.payloads


def test_a_kind_announced_after_the_listeners_loop_closed_is_noted_without_an_error():
    """A worker stopping closes its loop; a thread still subscribing must not fail for it."""
    loop = asyncio.new_event_loop()
    kinds = wake.postgres._Kinds(loop)
    loop.close()

    kinds.announce("r:", True)

    assert kinds.wanted == {"r:"}
