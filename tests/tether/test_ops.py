"""``/healthz``, ``/readyz`` and ``/metrics`` on the tether API, and a replica asked to
stop: unready first, still taking turns while it drains, then gone."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.tether.doubles import Factory, live_server
from visus.tether.server import create_app, tether_server

TOKEN = "ops-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _families(text: str) -> dict[str, list[float]]:
    return {f.name: [s.value for s in f.samples] for f in text_string_to_metric_families(text)}


def test_probes_are_public_and_bodiless_metrics_need_the_token(tmp_path: Path) -> None:
    app = create_app(data_dir=tmp_path, runner_factory=Factory(), token=TOKEN)
    with live_server(app) as url, httpx.Client(timeout=30) as http:
        for probe in ("/healthz", "/readyz"):
            answer = http.get(f"{url}{probe}")
            assert (answer.status_code, answer.content) == (200, b"")
            assert http.head(f"{url}{probe}").status_code == 200
            # A probe never takes a body (availability's budgets hold).
            assert http.post(f"{url}{probe}", content=b"x" * 100).status_code in (405, 415)
        assert http.get(f"{url}/metrics").status_code == 401
        inst = http.post(f"{url}/v1/instances", json={"model": "m"}, headers=AUTH).json()["id"]
        frame = {"type": "user.message", "session": "s", "payload": {"text": "hi there"}}
        posted = http.post(f"{url}/v1/instances/{inst}/tether", json=frame, headers=AUTH)
        assert posted.status_code == 202
        assert posted.headers["x-request-id"]
        scraped = http.get(f"{url}/metrics", headers=AUTH)
        app.state.draining = True
        assert http.get(f"{url}/readyz").status_code == 503
    assert scraped.status_code == 200
    found = _families(scraped.text)
    assert found["visus_instances"] == [1]
    assert found["visus_open_streams"] == [0]
    assert "visus_memory_budget_bytes" in found
    assert "visus_render_workers" in found
    assert "visus_http_requests" in found


def test_opened_metrics_need_no_token(tmp_path: Path) -> None:
    app = create_app(data_dir=tmp_path, runner_factory=Factory(), token=TOKEN, open_metrics=True)
    with live_server(app) as url:
        assert httpx.get(f"{url}/metrics").status_code == 200
        assert httpx.get(f"{url}/v1/instances").status_code == 401


def test_a_replica_asked_to_stop_turns_unready_before_it_stops_taking_turns(
    tmp_path: Path,
) -> None:
    app = create_app(data_dir=tmp_path, runner_factory=Factory(), token=TOKEN)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    # A drain far longer than the checks below take, even on a loaded machine.
    server = tether_server(app, drain_seconds=30, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        time.sleep(0.01)
    with httpx.Client(timeout=30, headers=AUTH) as http:
        inst = http.post(f"{url}/v1/instances", json={"model": "m"}).json()["id"]
        assert http.get(f"{url}/readyz").status_code == 200
        server.handle_exit(signal.SIGTERM, None)  # what an orchestrator sends
        assert http.get(f"{url}/readyz").status_code == 503
        frame = {"type": "user.message", "session": "s", "payload": {"text": "still here"}}
        assert http.post(f"{url}/v1/instances/{inst}/tether", json=frame).status_code == 202
        page = http.get(f"{url}/v1/instances/{inst}/tether/poll", params={"wait": 20}).json()
        assert page["frames"]
        assert thread.is_alive()
        server.handle_exit(signal.SIGTERM, None)  # asked again: now
    thread.join(30)
    assert not thread.is_alive()
    sock.close()
