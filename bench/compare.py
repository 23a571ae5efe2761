"""A/B: the main table for two checkouts, side by side, phases interleaved.

    .venv/bin/python bench/compare.py /tmp/base /tmp/patched [--only send_busy,read_messages]
    .venv/bin/python bench/compare.py /tmp/base /tmp/patched --db postgres

Each checkout gets its own fresh database and gunicorn; every round runs each
operation against one server and then the other (alternating who goes
first), so that a busy moment of the machine hurts both sides alike. With
``--db postgres`` both sides get a database of their own on one throwaway
cluster (``scripts/with-postgres``, as ``bench/run.py`` starts it), so that
they share its server as they share the machine. Reports
median throughput, p50 and server CPU per operation for each side, and B/A.
For trying a change before proposing it: put it in a ``git worktree``, never
in the checkout others work in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="checkout A (the baseline)")
    parser.add_argument("b", help="checkout B (the change)")
    parser.add_argument("--only", default="", help="comma-separated operations (floor always)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--b-workers", type=int, help="workers for B (default: --workers)")
    parser.add_argument("--b-threads", type=int, help="threads for B (default: --threads)")
    parser.add_argument("--active-requests", type=int, help="PLUMB_ACTIVE_REQUESTS (both sides)")
    parser.add_argument("--b-active-requests", type=int, help="PLUMB_ACTIVE_REQUESTS for B")
    parser.add_argument("--json", help="write the comparison here too")
    args = parser.parse_args()
    if args.db == "postgres":
        # One cluster for both sides.
        root = Path(__file__).resolve().parent.parent
        return bench.on_postgres(root, Path(__file__), lambda url: compare(args, url))
    return compare(args, None)


def compare(args: argparse.Namespace, pg_url: str | None) -> int:
    """A against B on SQLite, or on the PostgreSQL cluster at ``pg_url``."""
    base = bench.Config(
        app_dir=Path(args.a).resolve(), db=args.db, rounds=args.rounds, clients=8,
        requests=args.requests, growth_requests=0, growth_rounds=0, growth_sizes=[],
        phase_cap=20.0, workers=args.workers, threads=args.threads,
        active_requests=args.active_requests, warmup=100,
        skip_growth=True, out_dir=bench.RESULTS_DIR, label="compare", profile=False,
        only=[o for o in args.only.split(",") if o], skip_broadcast=True,
    )  # fmt: skip
    sides = {
        "A": base,
        "B": dataclasses.replace(
            base,
            app_dir=Path(args.b).resolve(),
            workers=args.b_workers or args.workers,
            threads=args.b_threads or args.threads,
            active_requests=(
                args.active_requests if args.b_active_requests is None else args.b_active_requests
            ),
        ),
    }
    results: dict[str, dict[str, list[bench.PhaseResult]]] = {"A": {}, "B": {}}
    queries = {}
    with tempfile.TemporaryDirectory(prefix="plumb-compare-") as tmp:
        servers = {}
        clocks = {}
        ops = {}
        try:
            for side, cfg in sides.items():
                workdir = Path(tmp) / side
                (workdir / "var").mkdir(parents=True)
                env, state, queries[side] = bench.prepare_main(cfg, workdir, pg_url, name=side)
                servers[side] = bench.start_server(cfg, env, workdir, side)
                clocks[side] = bench.RoundClock()
                ops[side] = bench.select_ops(
                    cfg, bench.all_operations(state, clocks[side], servers[side])
                )
                bench.warm_up(cfg, servers[side], ops[side])
                results[side] = {name: [] for name in ops[side]}
            for r in range(args.rounds):
                order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
                for name in ops["A"]:
                    for side in order:
                        clocks[side].round = r
                        phase = bench.run_op(
                            servers[side], ops[side][name], clients=8,
                            requests=args.requests, cap=20.0,
                        )  # fmt: skip
                        results[side][name].append(phase)
                        bench.log(
                            f"round {r + 1} {side} {name:14} {phase.throughput:8.1f}/s "
                            f"p50 {phase.percentile(50) * 1000:6.2f} ms "
                            f"cpu {phase.server_cpu / max(phase.completed, 1) * 1000:.2f} ms/op "
                            f"errors {phase.errors}"
                        )
        finally:
            for server in servers.values():
                bench.stop_server(server)

    summaries = {
        name: (bench.summarise(results["A"][name]), bench.summarise(results["B"][name]))
        for name in results["A"]
    }
    # The cluster's CPU beside the server's, where it runs on this machine (PostgreSQL).
    database = bool(summaries) and all(
        side["database_cpu_ms_per_op"] is not None for pair in summaries.values() for side in pair
    )
    rows = []
    report = {}
    for name, (a, b) in summaries.items():
        qa = queries["A"].get(name, {}).get("queries", "-")
        qb = queries["B"].get(name, {}).get("queries", "-")
        report[name] = {"A": a, "B": b, "queries": {"A": qa, "B": qb}}
        rows.append(
            f"| {name} | {a['throughput']:.0f} | {b['throughput']:.0f} "
            f"| {b['throughput'] / a['throughput']:.2f} | {a['p50_ms']:.2f} | {b['p50_ms']:.2f} "
            f"| {a['server_cpu_ms_per_op']:.2f} | {b['server_cpu_ms_per_op']:.2f} "
            + (
                f"| {a['database_cpu_ms_per_op']:.2f} | {b['database_cpu_ms_per_op']:.2f} "
                if database
                else ""
            )
            + f"| {qa} → {qb} |"
        )
    table = "\n".join(
        [
            f"A = {sides['A'].app_dir}, B = {sides['B'].app_dir}; median of {args.rounds} rounds",
            "",
            "| operation | A ops/s | B ops/s | B/A | A p50 ms | B p50 ms | A CPU ms/op "
            "| B CPU ms/op "
            + ("| A PostgreSQL CPU ms/op | B PostgreSQL CPU ms/op " if database else "")
            + "| queries |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"
            + ("---:|---:|" if database else "")
            + "---|",
            *rows,
        ]
    )
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
