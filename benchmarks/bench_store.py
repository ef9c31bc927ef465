"""Tether on files vs PostgreSQL: frames/s and turn latency (p50/p99).

One replica on files, one on PostgreSQL, three on PostgreSQL (in-process apps on
separate loopback ports, one throwaway cluster started here, as the tests do). Each
run posts text-and-image messages round-robin, keeps at most 8 turns in flight and
reads every frame on a long poll of another replica; the model is the offline
reference model.

    python -m benchmarks store
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

N = 90


async def _drive(urls: list[str]) -> tuple[float, list[float]]:
    from tests.app.test_replicas import png

    async with httpx.AsyncClient(timeout=60) as http:
        inst = (await http.post(f"{urls[0]}/v1/instances", json={"model": "reference"})).json()[
            "id"
        ]
        sent: dict[str, float] = {}
        latency: list[float] = []
        frames = 0
        gate = asyncio.Semaphore(8)

        async def reader() -> None:
            nonlocal frames
            after = 0
            while len(latency) < N:
                url = urls[-1]
                page = (
                    await http.get(
                        f"{url}/v1/instances/{inst}/tether/poll",
                        params={"after_seq": after, "wait": 5},
                    )
                ).json()
                for f in page["frames"]:
                    frames += 1
                    if f["type"] in ("assistant.done", "error") and f["reply_to"] in sent:
                        latency.append(time.perf_counter() - sent[f["reply_to"]])
                        gate.release()
                after = page["next_seq"]

        start = time.perf_counter()
        task = asyncio.create_task(reader())
        for i in range(N):
            await gate.acquire()
            body = {
                "type": "user.message",
                "session": f"s{i % 9}",
                "msg_id": f"m{i}",
                "payload": {
                    "text": f"m{i}",
                    "images": [{"media_type": "image/png", "data": png(i)}],
                },
            }
            sent[f"m{i}"] = time.perf_counter()
            r = await http.post(f"{urls[i % len(urls)]}/v1/instances/{inst}/tether", json=body)
            assert r.status_code == 202, r.text
        await task
        return frames / (time.perf_counter() - start), latency


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


def main() -> None:
    from tests.pgcluster import create_database, start_cluster, stop_cluster
    from tests.tether.doubles import live_server
    from visus.app import agent_runner_factory
    from visus.store.postgres import PostgresStore
    from visus.tether.server import create_app

    folder = Path(tempfile.mkdtemp(prefix="visus-bench-"))
    folder.chmod(0o755)
    cluster, proc = start_cluster(folder / "pg")
    try:
        results: list[tuple[str, float, list[float]]] = []
        for label, replicas in (
            ("1 replica, files", 0),
            ("1 replica, PostgreSQL", 1),
            ("3 replicas, PostgreSQL", 3),
        ):
            with ExitStack() as stack:
                if replicas == 0:
                    apps: list[Any] = [
                        create_app(data_dir=folder / "files", runner_factory=agent_runner_factory())
                    ]
                else:
                    url = create_database(cluster)
                    stores = [PostgresStore(url, replica=f"r{k}") for k in range(replicas)]
                    apps = [
                        create_app(
                            data_dir=folder / f"{label}-{k}",
                            runner_factory=agent_runner_factory(store=s),
                            store=s,
                        )
                        for k, s in enumerate(stores)
                    ]
                urls = [stack.enter_context(live_server(a)) for a in apps]
                fps, lat = asyncio.run(_drive(urls))
                results.append((label, fps, lat))
        base = results[0][1]
        print(f"tether, {N} image messages, 8 turns in flight, reference model")
        for label, fps, lat in results:
            print(
                f"  {label:24} {fps:7.0f} frames/s ({fps / base:4.2f}x files)  "
                f"turn p50 {_pct(lat, 0.5):6.0f} ms  p99 {_pct(lat, 0.99):6.0f} ms  "
                f"(mean {statistics.mean(lat) * 1000:.0f})"
            )
    finally:
        stop_cluster(proc)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
