"""Tether replicas on files vs PostgreSQL: frames/s, turn p50/p99, DB round trips per
turn, 1 vs 2 vs 3 replicas, and kill -9 of one mid-run. Replicas are separate
``visus serve`` processes; the model is a loopback fake that answers after a fixed wait
(``benchmarks/_fake_model.py``, OpenAI Chat Completions, which the ``reference``
provider speaks when ``VISUS_REFERENCE_URL`` names it); a throwaway PostgreSQL cluster
is started here (pg_stat_statements counts the statements: round trips).

Sessions are closed loops: send a message, wait for its ``assistant.done`` (read on one
SSE stream per instance, as the web chat reads, on the replicas in turn), send the next.
Phases, per setup:

- frame-bound: the model answers at once (12 words): what a replica costs per turn;
  goal: one replica on PostgreSQL at least 0.8x the file store's frames/s;
- model-bound: the model waits ``WAIT`` seconds; each replica runs ``SESSIONS`` turns
  at once (``[store] max_turns``), so 1 replica serves ``SESSIONS`` sessions, 3 serve
  3 x ``SESSIONS`` (and 2.5 x); goal: 3 replicas serve at least 2.5x the sessions of
  one at the same p99, taken as within +10% (one replica with 3 x ``SESSIONS`` is shown
  too: its p99 is what the other two replicas fix);
- kill -9: 3 replicas, model-bound, one killed a third of the way in; the clients go
  on with the others (an unanswered POST is sent again as a new message). Checked
  here: every frame read before the kill is still there, every acknowledged message
  is in the ring, and each got exactly one ``assistant.done`` (none an error).

    python -m benchmarks store

Sizing (environment): VISUS_BENCH_SECONDS per phase (15), VISUS_BENCH_WAIT (2.0),
VISUS_BENCH_SESSIONS per replica (8). The default run takes about four minutes; with
2 cores the turns of three replicas compete for CPU with the database, the model and
this load itself (the table gives the CPU each turn cost, to size a real deployment).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

SECONDS = float(os.environ.get("VISUS_BENCH_SECONDS", "15"))
WAIT = float(os.environ.get("VISUS_BENCH_WAIT", "2.0"))
SESSIONS = int(os.environ.get("VISUS_BENCH_SESSIONS", "8"))
PER_INSTANCE = 4  # sessions per instance (an instance queues at most 8 turns)
LEASE = 4.0
TOKEN = "bench-token"
TERMINAL = ("assistant.done", "error")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    url: str
    proc: subprocess.Popen[bytes]


@contextmanager
def replicas(n: int, store: str, folder: Path, model: str) -> Iterator[list[Replica]]:
    """``n`` ``visus serve`` processes on ``store`` ("" = files), ready to serve."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "visus.toml").write_text("")
    started: list[Replica] = []
    try:
        for k in range(n):
            port = _free_port()
            env = {
                **os.environ,
                "VISUS_DATA": str(folder / f"r{k}"),
                "VISUS_STORE": store,
                "VISUS_STORE__LEASE_SECONDS": str(LEASE),
                "VISUS_STORE__MAX_TURNS": str(SESSIONS),
                "VISUS_REFERENCE_URL": model,
                "VISUS_CONFIG": str(folder / "visus.toml"),
                "VISUS_TOKEN": TOKEN,
            }
            log = open(folder / f"r{k}.log", "ab")  # noqa: SIM115
            cli = "from visus.cli import main; main()"
            cmd = [sys.executable, "-c", cli, "serve", "--port", str(port), "--no-mcp"]
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
            started.append(Replica(f"http://127.0.0.1:{port}", proc))
        for r in started:
            _wait_ready(r, folder)
        yield started
    finally:
        for r in started:
            if r.proc.poll() is None:
                r.proc.terminate()
        for r in started:
            try:
                r.proc.wait(20)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait()


def _wait_ready(r: Replica, folder: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            got = httpx.get(f"{r.url}/v1/instances", headers=_auth(), timeout=2)
            if got.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if r.proc.poll() is not None or time.monotonic() > deadline:
            logs = "".join(p.read_text(errors="replace")[-2000:] for p in folder.glob("r*.log"))
            raise RuntimeError(f"a replica did not start:\n{logs}")
        time.sleep(0.2)


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Phase:
    """What one phase measured."""

    label: str
    sessions: int
    seconds: float = 0.0
    frames: int = 0
    latencies: list[float] = field(default_factory=list)
    statements: int | None = None
    #: CPU seconds the replicas (and the database server) spent in the phase.
    cpu_replicas: float = 0.0
    cpu_db: float | None = None
    checks: list[str] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.latencies)

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else 0.0


class Load:
    """Closed-loop sessions over fresh instances, an SSE reader per instance."""

    def __init__(self, http: httpx.AsyncClient, urls: list[str], ask: str, tag: str) -> None:
        self.http = http
        self.urls = list(urls)
        self.dead: set[str] = set()
        self.ask = ask
        self.tag = tag
        self.waiting: dict[str, asyncio.Future[str]] = {}
        self.acked: dict[str, tuple[str, int]] = {}  # msg_id -> (instance, seq)
        self.seen: dict[tuple[str, int], dict[str, Any]] = {}  # every frame read
        self.ends: dict[str, list[str]] = {}
        #: POSTs that got no answer (sent again as new messages).
        self.unanswered: list[str] = []
        #: What the readers had read when a replica was killed.
        self.before_kill: dict[tuple[str, int], dict[str, Any]] = {}
        self.frames = 0
        self._next = itertools.count()

    def url(self) -> str:
        alive = [u for u in self.urls if u not in self.dead]
        return alive[next(self._next) % len(alive)]

    async def instances(self, n: int) -> list[str]:
        made = []
        for _ in range(n):
            r = await self.http.post(f"{self.url()}/v1/instances", json={"model": "reference"})
            r.raise_for_status()
            made.append(str(r.json()["id"]))
        return made

    async def reader(self, inst: str) -> None:
        """Every frame of ``inst``, by SSE (as the web chat reads); on a lost stream
        (its replica died) again from another replica, after the last seq read."""
        last = 0
        while True:
            url = f"{self.url()}/v1/instances/{inst}/tether/stream"
            try:
                async with self.http.stream("GET", url, headers={"Last-Event-ID": str(last)}) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: "):
                            frame = json.loads(line[6:])
                            self._frame(inst, frame)
                            last = int(frame["seq"])
            except (httpx.HTTPError, ValueError):
                await asyncio.sleep(0.1)

    def _frame(self, inst: str, f: dict[str, Any]) -> None:
        self.frames += 1
        self.seen[(inst, int(f["seq"]))] = f
        if f["type"] in TERMINAL and f.get("reply_to") in self.ends:
            self.ends[f["reply_to"]].append(f["type"])
            fut = self.waiting.pop(f["reply_to"], None)
            if fut is not None and not fut.done():
                fut.set_result(f["type"])

    async def post(self, inst: str, session: str, n: int) -> asyncio.Future[str]:
        """Send one message until a replica acknowledges it; its ending, to await."""
        for attempt in itertools.count():
            msg_id = f"{self.tag}-{session}-{n}-{attempt}"
            body = {
                "type": "user.message",
                "session": session,
                "msg_id": msg_id,
                "payload": {"text": f"{self.ask} turn {n}"},
            }
            self.ends[msg_id] = []
            ending = self.waiting[msg_id] = asyncio.get_running_loop().create_future()
            url = self.url()
            try:
                r = await self.http.post(f"{url}/v1/instances/{inst}/tether", json=body)
            except httpx.ConnectError:
                self.dead.add(url)  # refused: as a balancer would, mark it down
                continue
            except httpx.HTTPError as e:  # no answer: it may be queued; send it anew
                self.unanswered.append(f"{type(e).__name__} from {url}")
                continue
            if r.status_code == 429:
                await asyncio.sleep(0.05)
                continue
            r.raise_for_status()
            self.acked[msg_id] = (inst, int(r.json()["seq"]))
            return ending
        raise AssertionError("unreachable")

    async def session(self, inst: str, session: str, end: float, out: Phase) -> None:
        for n in itertools.count():
            if time.monotonic() >= end:
                return
            start = time.monotonic()
            ending = await self.post(inst, session, n)
            await asyncio.wait_for(ending, 180)
            out.latencies.append(time.monotonic() - start)


async def run_phase(
    urls: list[str], sessions: int, ask: str, label: str, kill: Replica | None = None
) -> tuple[Phase, Load]:
    out = Phase(label, sessions)
    limits = httpx.Limits(max_connections=4 * sessions + 16)
    async with httpx.AsyncClient(timeout=60, headers=_auth(), limits=limits) as http:
        load = Load(http, urls, ask, label.split()[0] + str(time.monotonic_ns()))
        insts = await load.instances(-(-sessions // PER_INSTANCE))
        readers = [asyncio.create_task(load.reader(i)) for i in insts]
        start = time.monotonic()
        end = start + SECONDS
        tasks = [load.session(insts[k // PER_INSTANCE], f"s{k}", end, out) for k in range(sessions)]
        if kill is not None:
            tasks.append(_kill_later(kill, SECONDS / 3, load))
        await asyncio.gather(*tasks)
        out.seconds = time.monotonic() - start
        out.frames = load.frames
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    return out, load


async def _kill_later(victim: Replica, after: float, load: Load) -> None:
    await asyncio.sleep(after)
    load.before_kill = dict(load.seen)
    os.kill(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait(10)
    load.dead.add(victim.url)


async def check_after_kill(urls: list[str], load: Load) -> list[str]:
    """What kill -9 must not break, read back from a survivor; failures as lines."""
    bad: list[str] = []
    async with httpx.AsyncClient(timeout=60, headers=_auth()) as http:
        ring: dict[tuple[str, int], dict[str, Any]] = {}
        for inst in {i for i, _ in load.acked.values()}:
            page = (
                await http.get(f"{urls[0]}/v1/instances/{inst}/tether/poll", params={"limit": 1000})
            ).json()
            bad += [f"{inst}: the ring lost its start (gap)"] if page["gap"] else []
            ring |= {(inst, int(f["seq"])): f for f in page["frames"]}
    for key, frame in load.before_kill.items():
        if ring.get(key) != frame:
            bad.append(f"frame {key} read before the kill is gone or changed")
    for msg_id, key in load.acked.items():
        if ring.get(key, {}).get("msg_id") != msg_id:
            bad.append(f"acknowledged {msg_id} is not at {key}")
        if load.ends[msg_id] != ["assistant.done"]:
            bad.append(f"{msg_id} ended with {load.ends[msg_id]}")
    return bad


# --- the database's side -------------------------------------------------------------


class Statements:
    """Statements PostgreSQL ran for one database (pg_stat_statements, top level, with
    BEGIN/COMMIT/LISTEN): each is a round trip from a replica. Read on that database
    (the extension's functions live there); the two statements reading it count too."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _run(self, sql: str) -> Any:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql).fetchone()

    def reset(self) -> None:
        self._run(
            "SELECT pg_stat_statements_reset(0::oid, (SELECT oid FROM pg_database WHERE "
            "datname = current_database()), 0::bigint)"
        )

    def count(self) -> int:
        row = self._run(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return int(row[0])


# --- the run ---------------------------------------------------------------------------


FAST = "[wait 0 words 12]"


def model_ask() -> str:
    return f"[wait {WAIT} words 12 gap 0.02]"  # about 50 tokens a second


def _cpu(pid: int, children: bool = False) -> float:
    """CPU seconds of ``pid`` (with ``children``: of the ones it waited for, and of the
    live ones: a database server's backends)."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    own = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    total = own / tick
    if children:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                f = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(f[1]) == pid:
                total += (int(f[11]) + int(f[12])) / tick
    return total


@dataclass
class Probe:
    """What a phase cost: statements (pg_stat_statements) and CPU of the replicas and
    of the database server."""

    replicas: list[Replica]
    db_pid: int | None
    stats: Statements | None

    def _now(self) -> tuple[dict[int, float], float]:
        ours = {r.proc.pid: _cpu(r.proc.pid) for r in self.replicas if r.proc.poll() is None}
        return ours, (_cpu(self.db_pid, children=True) if self.db_pid else 0.0)

    async def run(self, phase: Any) -> Phase:
        """Await ``phase`` (a coroutine giving a Phase) and fill in what it cost (a
        replica killed meanwhile counts for nothing: its figures died with it)."""
        if self.stats is not None:
            self.stats.reset()
        before = self._now()
        out: Phase = await phase
        after = self._now()
        out.cpu_replicas = sum(cpu - before[0][pid] for pid, cpu in after[0].items())
        if self.stats is not None:
            out.statements = self.stats.count()
            out.cpu_db = after[1] - before[1]
        return out


async def _phase(urls: list[str], sessions: int, ask: str, label: str) -> Phase:
    return (await run_phase(urls, sessions, ask, label))[0]


async def setup_phases(setup: str, probe: Probe) -> list[Phase]:
    """The frame-bound and model-bound phases of one setup; for one PostgreSQL replica
    also the model-bound load of three, for three the 2.5x of one the goal names."""
    urls = [r.url for r in probe.replicas]
    n = len(urls)
    out = [
        await probe.run(_phase(urls, 2 * SESSIONS, FAST, f"{setup}: frame-bound")),
        await probe.run(_phase(urls, SESSIONS * n, model_ask(), f"{setup}: model-bound")),
    ]
    more = {"1 replica, PostgreSQL": 3.0, "3 replicas, PostgreSQL": 2.5}.get(setup)
    if more is not None:
        label = f"{setup}: model-bound, {more:g}x sessions of one"
        sessions = math.ceil(more * SESSIONS)
        out.append(await probe.run(_phase(urls, sessions, model_ask(), label)))
    return out


async def kill_phase(probe: Probe) -> Phase:
    reps = probe.replicas
    urls = [r.url for r in reps]
    label = "3 replicas, PostgreSQL: model-bound, kill -9 of one at 1/3"
    loads: list[Load] = []

    async def run() -> Phase:
        phase, load = await run_phase(urls, 3 * SESSIONS, model_ask(), label, kill=reps[1])
        loads.append(load)
        return phase

    phase = await probe.run(run())
    survivors = [r.url for r in reps if r.proc.poll() is None]
    load = loads[0]
    phase.checks = await check_after_kill(survivors, load)
    phase.checks.insert(
        0,
        f"{len(load.acked)} acknowledged messages, {phase.turns} answered; "
        f"{len(load.unanswered)} POSTs without an answer sent again as new messages",
    )
    return phase


def _print(phases: list[Phase], load: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    print(
        f"store: replicas as processes; model: fake, frame-bound answers at once, model-bound "
        f"after {WAIT} s; {SECONDS:.0f} s per phase; {SESSIONS} turns at once per replica"
    )
    print(f"load average before {load[0]}, after {load[1]} ({os.cpu_count()} CPUs)")
    head = f"  {'phase':58} {'sessions':>8} {'turns':>6} {'frames/s':>9} {'p50 ms':>7}"
    print(head + f" {'p99 ms':>7} {'DB stmts/turn':>13} {'CPU ms/turn: replicas':>21} {'db':>5}")
    for ph in phases:
        turns = max(ph.turns, 1)
        per = f"{ph.statements / turns:13.1f}" if ph.statements is not None else " " * 13
        db = f"{ph.cpu_db * 1000 / turns:5.1f}" if ph.cpu_db is not None else " " * 5
        print(
            f"  {ph.label:58} {ph.sessions:8} {ph.turns:6} {ph.frames / ph.seconds:9.0f} "
            f"{ph.pct(0.5):7.0f} {ph.pct(0.99):7.0f} {per} "
            f"{ph.cpu_replicas * 1000 / turns:21.1f} {db}"
        )
        for line in ph.checks:
            print(f"      {line}")
    _goals(phases)


def _goals(phases: list[Phase]) -> None:
    by = {p.label: p for p in phases}
    files = by["1 replica, files: frame-bound"]
    pg = by["1 replica, PostgreSQL: frame-bound"]
    ratio = (pg.frames / pg.seconds) / (files.frames / files.seconds)
    verdict = "met" if ratio >= 0.8 else "NOT met"
    print(f"  goal PostgreSQL >= 0.8x files frames/s: {ratio:.2f}x {verdict}")
    one = by["1 replica, PostgreSQL: model-bound"]
    for three in (
        by["3 replicas, PostgreSQL: model-bound, 2.5x sessions of one"],
        by["3 replicas, PostgreSQL: model-bound"],
    ):
        same = three.pct(0.99) <= one.pct(0.99) * 1.1  # "the same": within a tenth
        sessions = three.sessions / one.sessions
        print(
            f"  goal 3 replicas >= 2.5x the sessions of one at the same p99 (+10%): "
            f"{sessions:.1f}x the sessions, p99 {three.pct(0.99):.0f} vs {one.pct(0.99):.0f} "
            f"ms {'met' if same and sessions >= 2.5 else 'NOT met'}"
        )
    kill = next(p for p in phases if "kill" in p.label)
    ok = len(kill.checks) == 1
    print(
        f"  goal kill -9 loses no acknowledged frame, every acknowledged turn answered: "
        f"{'met' if ok else 'NOT met'}"
    )


async def _all(folder: Path, cluster: Any, db_pid: int, model: str) -> list[Phase]:
    import psycopg

    from tests.pgcluster import create_database

    phases: list[Phase] = []
    with replicas(1, "", folder / "files", model) as reps:
        phases += await setup_phases("1 replica, files", Probe(reps, None, None))
    for n in (1, 2, 3):
        url = create_database(cluster)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        name = f"{n} replica{'s' if n > 1 else ''}, PostgreSQL"
        with replicas(n, url, folder / f"pg{n}", model) as reps:
            probe = Probe(reps, db_pid, Statements(url))
            phases += await setup_phases(name, probe)
            if n == 3:
                phases.append(await kill_phase(probe))
    return phases


def main() -> None:
    from tests.pgcluster import start_cluster, stop_cluster

    folder = Path(tempfile.mkdtemp(prefix="visus-bench-store-"))
    folder.chmod(0o755)
    before = os.getloadavg()
    cluster, pg = start_cluster(
        folder / "pg", ("shared_preload_libraries=pg_stat_statements", "max_connections=300")
    )
    port = _free_port()
    fake = subprocess.Popen(
        [sys.executable, "-m", "benchmarks._fake_model", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "model.log", "wb"),  # noqa: SIM115
    )
    try:
        phases = asyncio.run(_all(folder, cluster, pg.pid, f"http://127.0.0.1:{port}"))
        _print(
            phases,
            (tuple(round(x, 1) for x in before), tuple(round(x, 1) for x in os.getloadavg())),
        )
    finally:
        fake.terminate()
        fake.wait(10)
        stop_cluster(pg)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
