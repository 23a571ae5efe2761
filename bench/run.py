"""plumb benchmark: throughput and latency against a floor, growth with stored data,
1,000 idle long-polls and how fast a note wakes one.

    .venv/bin/python bench/run.py                 # SQLite (a file in a temp dir)
    BENCH_DB=postgres .venv/bin/python bench/run.py

Starts plumb under gunicorn on 127.0.0.1 with a fresh database, seeds it
(``bench/seed.py``), drives it with a bounded load generator (threads, one
keep-alive ``http.client`` connection each, a fixed number of requests and a
time cap per phase, loopback only), and writes ``bench/results/latest.json``
and ``bench/results/latest.md``. Every figure is the median of several rounds,
and the rounds interleave the operations, so that a slow minute of the
machine hurts all of them alike rather than one. The wake phase
(``bench/wake.py``) follows the rounds on the same server.

Nothing here is a test: the targets are printed as PASS/FAIL lines and the
exit status is 0 unless the benchmark itself broke (a server that did not
start, requests that failed).

The pieces: ``serving.py`` (servers, databases, seeding), ``load.py`` (the
load generator), ``ops.py`` and ``mcp_ops.py`` (the operations, REST and
MCP), ``wake.py`` (the wake phase), ``report.py`` (targets and tables),
``profiling.py`` (``--profile``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from broadcast import run_broadcast
from load import Operation, PhaseResult, run_op, run_phase, summarise
from mcp_ops import MCP_LABELS, mcp_operations
from ops import GROWTH_CAP, LABELS, NotePool, RoundClock, growth_operations, main_operations
from profiling import profile_phase
from report import markdown, plans_markdown, targets
from serving import (
    BENCH_DIR,
    RESULTS_DIR,
    Config,
    Server,
    active_requests_label,
    commit_of,
    database_settings,
    database_version,
    fresh_database,
    log,
    manage,
    own_postgres,
    seed,
    server_env,
    start_server,
    stop_server,
)
from wake import run_wake

__all__ = ["Config", "PhaseResult", "run_op", "run_phase", "start_server", "summarise"]

# --- settings -------------------------------------------------------------------------


def parse_args() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--app-dir",
        default=os.environ.get("BENCH_APP_DIR") or str(BENCH_DIR.parent),
        help="plumb checkout to benchmark (default: this one); for trying a patch in a worktree",
    )
    parser.add_argument(
        "--db", default=os.environ.get("BENCH_DB", "sqlite"), choices=["sqlite", "postgres"]
    )
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", 5)))
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients per phase")
    parser.add_argument(
        "--requests", type=int, default=int(os.environ.get("BENCH_REQUESTS", 1500)),
        help="requests per operation per round",
    )  # fmt: skip
    parser.add_argument("--growth-requests", type=int, default=200)
    parser.add_argument("--growth-rounds", type=int, default=3)
    parser.add_argument(
        "--growth-sizes", default="1000,100000,1000000", help="stored notes/events, ascending"
    )
    parser.add_argument(
        "--phase-cap", type=float, default=float(os.environ.get("BENCH_PHASE_CAP", 6.0)),
        help="seconds per phase, at most (keeps make bench under 10 minutes on 2 cores)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=int(os.environ.get("BENCH_WORKERS", 2)))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", 4)))
    parser.add_argument(
        "--active-requests", type=int,
        default=int(os.environ.get("BENCH_ACTIVE_REQUESTS") or -1),
        help="requests each worker runs at once (PLUMB_ACTIVE_REQUESTS; 0: as many as threads); "
        "default: plumb's (1 on SQLite, 0 on PostgreSQL)",
    )  # fmt: skip
    parser.add_argument("--warmup", type=int, default=100, help="unrecorded requests per op")
    parser.add_argument("--skip-growth", action="store_true")
    parser.add_argument("--out-dir", default=str(RESULTS_DIR))
    parser.add_argument("--label", default="latest", help="file name of the results")
    parser.add_argument(
        "--profile", action="store_true",
        help="after the rounds, one more phase per operation under py-spy; "
        "writes profile-<op>.txt and .raw next to the results",
    )  # fmt: skip
    parser.add_argument(
        "--only", default="",
        help="comma-separated operations of the main table to run ('wake': the wake phase)",
    )  # fmt: skip
    parser.add_argument("--skip-wake", action="store_true")
    parser.add_argument("--skip-broadcast", action="store_true")
    parser.add_argument(
        "--skip-search", action="store_true",
        help="no search phase in the growth runs, and no search index built by their seeding",
    )  # fmt: skip
    parser.add_argument("--wake-pollers", type=int, default=1000)
    a = parser.parse_args()
    return Config(
        app_dir=Path(a.app_dir).resolve(),
        db=a.db,
        rounds=a.rounds,
        clients=a.clients,
        requests=a.requests,
        growth_requests=a.growth_requests,
        growth_rounds=a.growth_rounds,
        growth_sizes=[int(s) for s in a.growth_sizes.split(",") if s],
        phase_cap=a.phase_cap,
        workers=a.workers,
        threads=a.threads,
        active_requests=None if a.active_requests < 0 else a.active_requests,
        warmup=a.warmup,
        skip_growth=a.skip_growth,
        out_dir=Path(a.out_dir),
        label=a.label,
        profile=a.profile,
        only=[o for o in a.only.split(",") if o],
        skip_wake=a.skip_wake,
        skip_broadcast=a.skip_broadcast,
        wake_pollers=a.wake_pollers,
        skip_search=a.skip_search,
    )


def prepare_main(
    cfg: Config, workdir: Path, pg_url: str | None, name: str = "main"
) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """A fresh database for the main table: migrated, seeded; returns env, state, queries."""
    env = server_env(cfg, workdir, fresh_database(cfg, workdir, name, pg_url))
    log(f"{name}: migrating and seeding")
    manage(cfg, env, "migrate", "--noinput")
    state = seed(
        cfg, env, "setup", "--clients", str(cfg.clients), "--rounds", str(cfg.rounds),
        "--pool", str(cfg.pool), "--hall", str(cfg.wake_pollers if runs(cfg, "broadcast") else 0),
    )  # fmt: skip
    state_path = workdir / f"{name}-state.json"
    state_path.write_text(json.dumps(state))
    queries = seed(cfg, env, "queries", "--state", str(state_path), "--explain")
    log(f"{name}: seeded in {state['seconds']} s")
    return env, state, queries


def runs(cfg: Config, phase: str) -> bool:
    """Whether the run has the phase ``wake`` or ``broadcast`` (after the rounds)."""
    return not getattr(cfg, f"skip_{phase}") and (not cfg.only or phase in cfg.only)


def all_operations(
    state: dict[str, Any], clock: RoundClock, server: Server
) -> dict[str, Operation]:
    """The main table's operations, REST then MCP, in the order each round runs them."""
    pool = NotePool(state["pool"], server.port)
    return {**main_operations(state, clock, pool), **mcp_operations(state, pool)}


def select_ops(cfg: Config, ops: dict[str, Operation]) -> dict[str, Operation]:
    if not cfg.only:
        return ops
    wanted = set(cfg.only) | {"floor"}
    if "check_pending" in wanted:
        wanted.add("leave_note")  # it collects the notes leave_note left
    return {name: op for name, op in ops.items() if name in wanted}


def warm_up(cfg: Config, server: Server, ops: dict[str, Operation]) -> None:
    for name, op in ops.items():
        warm = run_op(server, op, clients=cfg.clients, requests=cfg.warmup, cap=cfg.phase_cap)
        if warm.errors:
            raise SystemExit(f"warm-up of {name} failed: {warm.first_error}")


def wake_servers(
    cfg: Config, env: dict[str, str], workdir: Path, server: Server
) -> tuple[Server, Server | None]:
    """Who holds the polls and who takes the notes: on SQLite the one server (2
    processes); on PostgreSQL a second server, with its own var/, on the same database."""
    if cfg.db == "sqlite":
        return server, None
    var_b = workdir / "var-b"
    var_b.mkdir(exist_ok=True)
    other = start_server(cfg, {**env, "PLUMB_VAR_DIR": str(var_b)}, workdir, "b")
    return other, other


def run_main(cfg: Config, workdir: Path, pg_url: str | None) -> dict[str, Any]:
    env, state, queries = prepare_main(cfg, workdir, pg_url)
    server = start_server(cfg, env, workdir, "main")
    clock = RoundClock()
    ops = all_operations(state, clock, server)
    floor = ops["floor"]
    ops = select_ops(cfg, ops)
    results: dict[str, list[PhaseResult]] = {name: [] for name in ops}
    wake = broadcast = None
    try:
        warm_up(cfg, server, ops)
        for r in range(cfg.rounds):
            clock.round = r
            for name, op in ops.items():
                phase = run_op(
                    server, op, clients=cfg.clients, requests=cfg.requests, cap=cfg.phase_cap
                )
                results[name].append(phase)
                log(
                    f"round {r + 1}/{cfg.rounds} {name:14} {phase.throughput:8.1f}/s "
                    f"p50 {phase.percentile(50) * 1000:6.2f} ms p99 "
                    f"{phase.percentile(99) * 1000:7.2f} ms errors {phase.errors}"
                )
        peaks = server.worker_peak_rss_kib()
        if runs(cfg, "wake") or runs(cfg, "broadcast"):
            send_server, other = wake_servers(cfg, env, workdir, server)
            try:
                if runs(cfg, "wake"):
                    wake = run_wake(
                        cfg, server, send_server, state["pool"][: cfg.wake_pollers],
                        [p["sender"] for p in state["pairs"]], floor,
                    )  # fmt: skip
                if runs(cfg, "broadcast"):
                    broadcast = run_broadcast(
                        server, send_server, state["hall_room"],
                        state["pool"][: cfg.wake_pollers], state["hall_speaker"],
                    )  # fmt: skip
            finally:
                if other is not None:
                    stop_server(other)
        if cfg.profile:
            clock.round = 0
            for name, op in ops.items():
                profile_phase(cfg, server, name, op)
    finally:
        stop_server(server)
    summary = {name: summarise(phases) for name, phases in results.items()}
    floor_rate = summary["floor"]["throughput"]
    for name, figures in summary.items():
        figures["ratio_to_floor"] = (
            round(figures["throughput"] / floor_rate, 2) if floor_rate else None
        )
        figures["label"] = {**LABELS, **MCP_LABELS}[name]
    return {
        "operations": summary,
        "queries": queries,
        "wake": wake,
        "broadcast": broadcast,
        "worker_peak_rss_mib": round(max(peaks.values()) / 1024, 1) if peaks else None,
        "worker_peak_rss_mib_each": [round(v / 1024, 1) for v in peaks.values()],
    }


def run_growth(cfg: Config, workdir: Path, pg_url: str | None) -> dict[str, Any]:
    env = server_env(cfg, workdir, fresh_database(cfg, workdir, "growth", pg_url))
    log("growth: migrating and seeding identities")
    manage(cfg, env, "migrate", "--noinput")
    state = seed(
        cfg, env, "setup", "--clients", "1", "--rounds", "0", "--spread", "0",
        "--read-events", "0",
    )  # fmt: skip
    state_path = workdir / "growth-state.json"
    state_path.write_text(json.dumps(state))
    server = start_server(cfg, env, workdir, "growth")
    sizes: dict[str, Any] = {}
    head = [0]
    ops = growth_operations(state, lambda: head[0], search=not cfg.skip_search)
    no_index = ["--no-index"] if cfg.skip_search else []
    try:
        for size in cfg.growth_sizes:
            seeded = seed(
                cfg, env, "grow", "--state", str(state_path), "--rows", str(size), *no_index
            )
            head[0] = seeded["events_total"]
            log(
                f"growth: {size} rows stored (seeded in {seeded['seconds']} s, of which "
                f"{seeded.get('index_seconds', 0)} s building the search index)"
            )
            results: dict[str, list[PhaseResult]] = {name: [] for name in ops}
            for op in ops.values():  # warm caches after the bulk load
                run_phase(server, op, clients=1, requests=cfg.warmup // 2, cap=GROWTH_CAP)
            for _ in range(cfg.growth_rounds):
                for name, op in ops.items():
                    results[name].append(
                        run_phase(
                            server, op, clients=1, requests=cfg.growth_requests,
                            cap=GROWTH_CAP,
                        )
                    )  # fmt: skip
            sizes[str(size)] = {
                "seeded": seeded,
                **{name: summarise(phases) for name, phases in results.items()},
            }
            for name in ("search", "search_broad"):
                if name in results:
                    sizes[str(size)][name].update(
                        pooled_percentiles(results[name]),
                        matches=seeded["search"][name]["matches"],
                        q=seeded["search"][name]["q"],
                    )
            log(
                f"growth {size:>8}: "
                + "  ".join(f"{n} p50 {sizes[str(size)][n]['p50_ms']} ms" for n in ops)
            )
        queries = seed(cfg, env, "queries", "--state", str(state_path), "--explain", "--growth")
        peaks = server.worker_peak_rss_kib()
    finally:
        stop_server(server)
    return {
        "sizes": sizes,
        "queries_at_largest": queries,
        "worker_peak_rss_mib": round(max(peaks.values()) / 1024, 1) if peaks else None,
    }


def pooled_percentiles(phases: list[PhaseResult]) -> dict[str, float]:
    """p50 and p99 over every request of every round (the search targets' figures)."""
    pooled = PhaseResult(
        completed=sum(p.completed for p in phases),
        errors=0,
        seconds=sum(p.seconds for p in phases),
        latencies=[latency for p in phases for latency in p.latencies],
    )
    return {
        "requests": pooled.completed,
        "p50_ms_all": round(pooled.percentile(50) * 1000, 2),
        "p99_ms_all": round(pooled.percentile(99) * 1000, 2),
    }


def raise_open_files() -> None:
    """The wake phase holds 1,000+ connections open: lift the soft limit on open files
    to the hard one (the servers started from here inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run(cfg: Config, pg_url: str | None) -> int:
    started = time.monotonic()
    raise_open_files()
    with tempfile.TemporaryDirectory(prefix="plumb-bench-") as tmp:
        workdir = Path(tmp)
        (workdir / "var").mkdir()
        loadavg_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
        result: dict[str, Any] = {
            "db": cfg.db,
            "meta": {
                "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "commit": commit_of(cfg.app_dir),
                "app_dir": str(cfg.app_dir),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "database_version": database_version(cfg, pg_url),
                "database_settings": database_settings(cfg, pg_url),
                "workers": cfg.workers,
                "threads": cfg.threads,
                "active_requests": active_requests_label(cfg),
                "clients": cfg.clients,
                "rounds": cfg.rounds,
                "requests": cfg.requests,
                "growth_rounds": cfg.growth_rounds,
                "growth_requests": cfg.growth_requests,
                "loadavg_before": loadavg_before,
            },
        }
        result["main"] = run_main(cfg, workdir, pg_url)
        if not cfg.skip_growth:
            result["growth"] = run_growth(cfg, workdir, pg_url)
        result["meta"]["loadavg_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    result["meta"]["seconds"] = round(time.monotonic() - started, 1)
    result["targets"] = targets(result)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown(result)
    # latest.* is whichever run came last; latest-<db>.* keeps one per database.
    for label in dict.fromkeys([cfg.label, f"{cfg.label}-{cfg.db}"]):
        (cfg.out_dir / f"{label}.json").write_text(json.dumps(result, indent=2) + "\n")
        (cfg.out_dir / f"{label}.md").write_text(f"{table}\n{plans_markdown(result)}")
    print(table)
    print(
        f"bench: {result['meta']['seconds']} s; results in {cfg.out_dir}/{cfg.label}.{{json,md}} "
        f"and {cfg.label}-{cfg.db}.{{json,md}}"
    )
    errors = sum(f["errors"] for f in result["main"]["operations"].values())
    wake = result["main"]["wake"]
    if wake:
        errors += wake["problem_count"] + len(wake["wake"]["problems"])
        errors += sum(wake[k]["errors"] for k in ("floor_with", "floor_without", "floor_steady"))
    broadcast = result["main"].get("broadcast")
    if broadcast:
        errors += broadcast["problem_count"]
    if errors:
        print(f"bench: {errors} requests failed; the figures above are not trustworthy")
        return 1
    return 0


def on_postgres(app_dir: Path, script: Path, go: Callable[[str], int]) -> int:
    """``go(url)`` on a PostgreSQL cluster: BENCH_POSTGRES_URL's, else a throwaway one.

    The throwaway cluster is the one ``app_dir``'s ``scripts/with-postgres``
    starts: it exports DATABASE_URL for the command it runs, so ``script``
    runs again inside it, with this run's arguments, and finds that URL as
    BENCH_POSTGRES_URL. Without the wrapper (or with BENCH_OWN_PG set) the
    bench starts one itself (``own_postgres``).
    """
    if os.environ.get("BENCH_POSTGRES_URL"):
        return go(os.environ["BENCH_POSTGRES_URL"])
    wrapper = app_dir / "scripts" / "with-postgres"
    if wrapper.exists() and os.access(wrapper, os.X_OK) and not os.environ.get("BENCH_OWN_PG"):
        command = 'BENCH_POSTGRES_URL="$DATABASE_URL" exec "$0" "$@"'
        return subprocess.call(
            [str(wrapper), "sh", "-c", command, sys.executable, str(script.resolve()),
             *sys.argv[1:]],
            cwd=app_dir,
        )  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="plumb-bench-pg-") as tmp,
        own_postgres(Path(tmp)) as url,
    ):
        return go(url)


def main() -> int:
    cfg = parse_args()
    if cfg.db == "sqlite":
        return run(cfg, None)
    return on_postgres(cfg.app_dir, Path(__file__), lambda url: run(cfg, url))


if __name__ == "__main__":
    sys.exit(main())
