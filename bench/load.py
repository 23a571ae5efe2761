"""The load generator: keep-alive clients, bounded phases, their figures."""

from __future__ import annotations

import http.client
import itertools
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from serving import HOST, Server


class Client:
    """One keep-alive HTTP/1.1 connection; reconnects when the server closed it."""

    def __init__(self, port: int):
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def request(
        self,
        method: str,
        path: str,
        token: str,
        body: bytes | None = None,
        extra: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {token}", "Host": HOST, **(extra or {})}
        if body is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(HOST, self.port, timeout=60)
            try:
                self.conn.request(method, path, body=body, headers=headers)
                response = self.conn.getresponse()
                data = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self.close()
                return response.status, data
            except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError):
                # The keep-alive connection was closed under us: one retry on a new one.
                # Only the idempotent reads and a failure before sending reach here in
                # practice; a write retried here would show up as a failed check.
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class PhaseResult:
    completed: int
    errors: int
    seconds: float
    latencies: list[float]
    first_error: str = ""
    server_cpu: float = 0.0
    server_sys: float = 0.0
    # The PostgreSQL cluster's CPU over the phase, where it runs on this machine.
    database_cpu: float | None = None

    @property
    def throughput(self) -> float:
        return self.completed / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))
        return ordered[index]


# An operation: called as op(client, worker_index, request_index) -> error text or "".
Operation = Callable[[Client, int, int], str]


@dataclass
class Op:
    """An operation with what must happen around its phase, none of it timed.

    ``prepare(client, k)`` runs on each client's connection before the clock
    starts (an MCP client's ``initialize``); ``limit()`` caps the phase's
    requests (a check can collect only the notes left before it); ``after()``
    runs once the phase is over (collecting notes a phase left behind).
    """

    call: Operation
    prepare: Callable[[Client, int], str] | None = None
    limit: Callable[[], int] | None = None
    after: Callable[[], str] | None = None

    def __call__(self, client: Client, k: int, i: int) -> str:
        return self.call(client, k, i)


def run_phase(
    server: Server, op: Operation, *, clients: int, requests: int, cap: float
) -> PhaseResult:
    """``clients`` threads run ``op`` until ``requests`` are done or ``cap`` seconds pass."""
    counter = itertools.count()
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    barrier = threading.Barrier(clients + 1)
    prepare = getattr(op, "prepare", None)

    def worker(k: int) -> None:
        client = Client(server.port)
        mine = latencies[k]
        if prepare is not None:
            try:
                problem = prepare(client, k)
            except Exception as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                errors.append(f"prepare: {problem}")
        barrier.wait()
        deadline = time.monotonic() + cap
        try:
            while time.monotonic() < deadline:
                i = next(counter)
                if i >= requests:
                    break
                t0 = time.perf_counter()
                try:
                    problem = op(client, k, i)
                except Exception as exc:  # a broken connection, a timeout
                    problem = f"{type(exc).__name__}: {exc}"
                    client.close()
                if problem:
                    errors.append(problem)
                else:
                    mine.append(time.perf_counter() - t0)
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    user_before, sys_before = server.worker_cpu_split()
    database_before = server.database_cpu_seconds()
    started = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    flat = [x for per in latencies for x in per]
    user_after, sys_after = server.worker_cpu_split()
    database_after = server.database_cpu_seconds()
    return PhaseResult(
        completed=len(flat),
        errors=len(errors),
        seconds=seconds,
        latencies=flat,
        first_error=errors[0] if errors else "",
        server_cpu=user_after + sys_after - user_before - sys_before,
        server_sys=sys_after - sys_before,
        database_cpu=(
            None
            if database_before is None or database_after is None
            else database_after - database_before
        ),
    )


def run_op(
    server: Server, op: Operation, *, clients: int, requests: int, cap: float
) -> PhaseResult:
    """``run_phase`` with the operation's limit and its untimed clean-up after it."""
    limit = getattr(op, "limit", None)
    if limit is not None:
        requests = min(requests, limit())
    phase = run_phase(server, op, clients=clients, requests=requests, cap=cap)
    after = getattr(op, "after", None)
    if after is not None:
        problem = after()
        if problem:
            phase.errors += 1
            phase.first_error = phase.first_error or f"after the phase: {problem}"
    return phase


def _expect(status: int, data: bytes, want: int) -> str:
    if status != want:
        return f"HTTP {status} (wanted {want}): {data[:200]!r}"
    return ""


def _per_op_ms(seconds: float | None, completed: int) -> float:
    return (seconds or 0.0) / completed * 1000 if completed else 0.0


def summarise(results: list[PhaseResult]) -> dict[str, Any]:
    database = [r for r in results if r.database_cpu is not None]
    return {
        "throughput": round(statistics.median(r.throughput for r in results), 1),
        # Unrounded, for the targets: 0.497 is not 0.5.
        "throughput_exact": statistics.median(r.throughput for r in results),
        "p50_ms": round(statistics.median(r.percentile(50) for r in results) * 1000, 2),
        "p99_ms": round(statistics.median(r.percentile(99) for r in results) * 1000, 2),
        "server_cpu_ms_per_op": round(
            statistics.median(_per_op_ms(r.server_cpu, r.completed) for r in results), 2
        ),
        "server_sys_ms_per_op": round(
            statistics.median(_per_op_ms(r.server_sys, r.completed) for r in results), 2
        ),
        # PostgreSQL's side of each call, where the cluster runs on this machine.
        "database_cpu_ms_per_op": (
            round(statistics.median(_per_op_ms(r.database_cpu, r.completed) for r in database), 2)
            if len(database) == len(results) and results
            else None
        ),
        "rounds": [
            {
                "throughput": round(r.throughput, 1),
                "p50_ms": round(r.percentile(50) * 1000, 2),
                "p99_ms": round(r.percentile(99) * 1000, 2),
                "completed": r.completed,
                "errors": r.errors,
                "seconds": round(r.seconds, 2),
            }
            for r in results
        ],
        "errors": sum(r.errors for r in results),
        "first_error": next((r.first_error for r in results if r.first_error), ""),
    }
