"""``--profile``: one more phase per operation with py-spy sampling every worker."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from load import Operation, run_op
from serving import Config, Server, log


def profile_phase(cfg: Config, server: Server, name: str, op: Operation) -> None:
    """One more phase of ``op`` with py-spy sampling every worker; writes a summary."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        raise SystemExit("--profile needs py-spy (requirements.txt): run make install")
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    raws = []
    spies = []
    for pid in server.worker_pids():
        raw = cfg.out_dir / f"profile-{name}-{pid}.raw"
        raws.append(raw)
        spies.append(
            subprocess.Popen(
                [py_spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
                 "--nonblocking", "--gil", "--function", "--output", str(raw)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
    time.sleep(1.0)  # py-spy attaches
    phase = run_op(server, op, clients=cfg.clients, requests=cfg.requests, cap=cfg.phase_cap)
    for spy in spies:
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        spy.wait(timeout=30)
    stacks: dict[str, int] = {}
    for raw in raws:
        if raw.exists():
            for line in raw.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                if stack and count.isdigit():
                    stacks[stack] = stacks.get(stack, 0) + int(count)
    combined = cfg.out_dir / f"profile-{name}.raw"
    combined.write_text("".join(f"{k} {v}\n" for k, v in stacks.items()))
    for raw in raws:
        raw.unlink(missing_ok=True)
    head = (
        f"{name}: {phase.throughput:.0f}/s under py-spy, p50 {phase.percentile(50) * 1000:.2f} ms"
    )
    (cfg.out_dir / f"profile-{name}.txt").write_text(f"{head}\n\n{profile_summary(stacks)}")
    log(f"profile of {name} written to {cfg.out_dir}/profile-{name}.txt")


def profile_summary(stacks: dict[str, int], top: int = 45) -> str:
    """Inclusive and self shares of the sampled time, by function."""
    total = sum(stacks.values()) or 1
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    for stack, count in stacks.items():
        frames = stack.split(";")
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count
        own[frames[-1]] = own.get(frames[-1], 0) + count
    lines = [f"{total} samples (GIL held)", "", "inclusive %  function"]
    for frame, count in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{100 * count / total:10.1f}  {frame}")
    lines += ["", "self %  function"]
    for frame, count in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{100 * count / total:6.1f}  {frame}")
    return "\n".join(lines) + "\n"
