"""The benchmark's servers: settings, databases, gunicorn started and stopped, seeding.

Used by ``bench/run.py`` and ``bench/compare.py``; nothing here measures.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
HOST = "127.0.0.1"


@dataclass
class Config:
    app_dir: Path
    db: str
    rounds: int
    clients: int
    requests: int
    growth_requests: int
    growth_rounds: int
    growth_sizes: list[int]
    phase_cap: float
    workers: int
    threads: int
    warmup: int
    # PLUMB_ACTIVE_REQUESTS for the server; None leaves plumb's default.
    active_requests: int | None
    skip_growth: bool
    out_dir: Path
    label: str
    profile: bool
    only: list[str]
    skip_wake: bool = False
    skip_broadcast: bool = False
    wake_pollers: int = 1000
    # The search phase runs with the growth runs, on their history (bench/corpus.py).
    skip_search: bool = False

    @property
    def pool(self) -> int:
        """Recipient sessions to seed: one per note of a phase, and the wake phase's pollers."""
        return max(self.requests, self.warmup, self.wake_pollers)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- databases ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def own_postgres(workdir: Path) -> Iterator[str]:
    """A throwaway PostgreSQL cluster, for checkouts without ``scripts/with-postgres``.

    Runs as the ``postgres`` user when started as root (PostgreSQL refuses
    root). ``synchronous_commit=off`` matches the durability class of the
    SQLite setup (WAL, synchronous=NORMAL: a process crash loses nothing, an
    OS crash may lose the last commits).
    """
    initdb = shutil.which("initdb") or _pg_bin("initdb")
    pg_ctl = shutil.which("pg_ctl") or _pg_bin("pg_ctl")
    data = workdir / "pgdata"
    data.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres")
        shutil.chown(data, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    subprocess.run(
        [*as_user, initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    options = (
        f"-p {port} -c listen_addresses={HOST} -k {workdir} -c synchronous_commit=off "
        "-c max_connections=200 -c shared_buffers=256MB"
    )
    subprocess.run(
        [*as_user, pg_ctl, "-D", str(data), "-o", options, "-l", str(workdir / "pg.log"),
         "-w", "start"],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield f"postgres://postgres@{HOST}:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
            stdout=subprocess.DEVNULL,
            check=False,
        )


def _pg_bin(name: str) -> str:
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise SystemExit(f"BENCH_DB=postgres needs PostgreSQL's {name}; it is not installed.")


def fresh_database(cfg: Config, workdir: Path, name: str, pg_url: str | None) -> str:
    """A database URL nobody else uses: a new SQLite file, or a new PostgreSQL database."""
    if cfg.db == "sqlite":
        return f"sqlite:///{workdir / f'{name}.sqlite3'}"
    import psycopg

    assert pg_url is not None
    with psycopg.connect(_psycopg_dsn(pg_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "bench_{name}"')
        conn.execute(f'CREATE DATABASE "bench_{name}"')
    base, _, _ = pg_url.rpartition("/")
    query = ""
    if "?" in pg_url:
        base, _, rest = pg_url.partition("?")
        base = base.rpartition("/")[0]
        query = "?" + rest
    return f"{base}/bench_{name}{query}"


def _psycopg_dsn(url: str) -> str:
    import dj_database_url

    cfg = dj_database_url.parse(url)
    parts = {
        "dbname": cfg.get("NAME"),
        "user": cfg.get("USER"),
        "password": cfg.get("PASSWORD"),
        "host": cfg.get("HOST"),
        "port": cfg.get("PORT"),
    }
    return " ".join(f"{k}={v}" for k, v in parts.items() if v)


# --- the server ------------------------------------------------------------------------


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    env: dict[str, str]
    log_path: Path
    # The PostgreSQL cluster's postmaster, where it runs on this machine: its
    # backends' CPU is part of what a call costs (``database_cpu_seconds``).
    database_pid: int | None = None

    def worker_pids(self) -> list[int]:
        pid = self.process.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return []
        return [int(c) for c in children]

    def worker_peak_rss_kib(self) -> dict[int, int]:
        peaks = {}
        for pid in self.worker_pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[pid] = int(line.split()[1])
        return peaks

    def worker_cpu_seconds(self) -> float:
        return sum(self.worker_cpu_split())

    def worker_cpu_split(self) -> tuple[float, float]:
        """The workers' user and system CPU seconds: a send that costs more in the
        kernel (locks, wake-ups, writes) than in Python shows in the second."""
        tick = os.sysconf("SC_CLK_TCK")
        user = system = 0.0
        for pid in self.worker_pids():
            with contextlib.suppress(OSError):
                fields = _stat_fields(pid)
                user += int(fields[11]) / tick
                system += int(fields[12]) / tick
        return user, system

    def database_cpu_seconds(self) -> float | None:
        """CPU seconds of the PostgreSQL cluster so far, or None where it cannot be read.

        The postmaster's own, the CPU of the backends it has reaped (a backend
        that ends counts whole there, so a phase's difference holds what it
        spent meanwhile), and that of every process it runs now: the server's
        backends, its listeners', the WAL writer, the checkpointer, autovacuum.
        With two servers on one cluster (``bench/compare.py``) a phase counts
        whatever the cluster did meanwhile, which is that phase's server's work
        but for background work the other's writes left.
        """
        if self.database_pid is None:
            return None
        tick = os.sysconf("SC_CLK_TCK")
        pid = self.database_pid
        try:
            fields = _stat_fields(pid)
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return None
        total = sum(int(f) for f in fields[11:15])
        for child in children:
            with contextlib.suppress(OSError):
                fields = _stat_fields(int(child))
                total += int(fields[11]) + int(fields[12])
        return total / tick


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name, from field 3 (state) on."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def postmaster_pid(database_url: str) -> int | None:
    """The pid of the cluster behind ``database_url`` if it runs on this machine, else None."""
    if not database_url.startswith(("postgres://", "postgresql://")):
        return None
    import psycopg

    try:
        with psycopg.connect(_psycopg_dsn(database_url), autocommit=True) as conn:
            data_directory = conn.execute("SHOW data_directory").fetchone()[0]
        pid = int(Path(data_directory, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError, psycopg.Error):
        return None
    # Another machine's cluster may keep its files at the same path here: the process must be it.
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return pid if name in ("postgres", "postmaster") else None


def active_requests_label(cfg: Config) -> str:
    """How many requests each worker runs at once, as plumb will size its gate."""
    width = cfg.active_requests
    if width is None:
        width = 1 if cfg.db == "sqlite" else 0
    return str(width) if width else "all"


def server_env(cfg: Config, workdir: Path, database_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PLUMB_", "DJANGO_")) and k not in {"DATABASE_URL", "DEBUG"}
    }
    env.update(
        {
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "plumb_site.settings",
            "PLUMB_VAR_DIR": str(workdir / "var"),
            "SECRET_KEY": "bench-" + "x" * 50,
            "DEBUG": "false",
            "LOG_LEVEL": "WARNING",
            # A benchmark client is far past any sane per-session rate by design.
            "PLUMB_RATE_SESSION": "off",
            "PLUMB_RATE_KEY": "off",
            # Sessions must outlive the whole run (seeded before it starts).
            "PLUMB_SESSION_TTL": "86400",
            "BENCH_APP_DIR": str(cfg.app_dir),
            "PYTHONPATH": str(cfg.app_dir),
        }
    )
    if cfg.active_requests is not None:
        env["PLUMB_ACTIVE_REQUESTS"] = str(cfg.active_requests)
    return env


def manage(cfg: Config, env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args], cwd=cfg.app_dir, env=env, check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


def seed(cfg: Config, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / "seed.py"), *args],
        cwd=cfg.app_dir,
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def start_server(cfg: Config, env: dict[str, str], workdir: Path, name: str) -> Server:
    port = free_port()
    log_path = workdir / f"gunicorn-{name}.log"
    # The checkout's own environment when it has one, so that an A/B across a change of
    # requirements (uvloop, say) runs each side on its own.
    own = cfg.app_dir / ".venv" / "bin" / "python"
    python = str(own) if own.exists() else sys.executable
    command = [
        python, "-m", "gunicorn",
        "--bind", f"{HOST}:{port}",
        "--workers", str(cfg.workers),
        "--keep-alive", "30",
        "--graceful-timeout", "5",
        "--no-control-socket",
        "--log-level", "warning",
    ]  # fmt: skip
    # As `make serve` runs it (metrics summed over processes, so their cost is
    # measured too), where the code under test has the configuration; a
    # configuration that names the application also names its worker.
    config = cfg.app_dir / "plumb_site" / "gunicorn_config.py"
    if config.exists():
        command += ["--config", "python:plumb_site.gunicorn_config"]
    if config.exists() and "wsgi_app" in config.read_text():
        env = {**env, "PLUMB_THREADS": str(cfg.threads)}
    else:
        command += ["plumb_site.wsgi", "--worker-class", "gthread", "--threads", str(cfg.threads)]
    process = subprocess.Popen(
        command,
        cwd=cfg.app_dir,
        env=env,
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = Server(
        process=process,
        port=port,
        env=env,
        log_path=log_path,
        database_pid=postmaster_pid(env.get("DATABASE_URL", "")),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gunicorn exited: {log_path.read_text()[-2000:]}")
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection(HOST, port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200 and len(server.worker_pids()) >= cfg.workers:
                conn.close()
                return server
            conn.close()
        time.sleep(0.1)
    stop_server(server)
    raise SystemExit(f"gunicorn did not answer on {HOST}:{port}: {log_path.read_text()[-2000:]}")


def stop_server(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait()


def database_settings(cfg: Config, pg_url: str | None) -> dict[str, str]:
    """What decides whether a commit is durable (PostgreSQL); SQLite's are fixed by plumb."""
    if cfg.db == "sqlite":
        return {"journal_mode": "wal", "synchronous": "normal"}
    import psycopg

    assert pg_url is not None
    with psycopg.connect(_psycopg_dsn(pg_url), autocommit=True) as conn:
        return {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("fsync", "synchronous_commit", "shared_buffers")
        }


def database_version(cfg: Config, pg_url: str | None) -> str:
    if cfg.db == "sqlite":
        import sqlite3

        return f"SQLite {sqlite3.sqlite_version}"
    import psycopg

    assert pg_url is not None
    with psycopg.connect(_psycopg_dsn(pg_url), autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
    settings = database_settings(cfg, pg_url)
    return f"PostgreSQL {version} ({', '.join(f'{k}={v}' for k, v in settings.items())})"


def commit_of(app_dir: Path) -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=app_dir, capture_output=True,
            text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=app_dir,
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"{sha}{'+changes' if dirty else ''}"
