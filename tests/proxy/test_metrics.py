"""``/metrics`` after a proxied session, read with prometheus_client's own parser: the
same counters as ``/stats``, and the dollars saved per model equal to what ``visus
usage --proxy`` reports from the ledger the proxy wrote. The probes answer without the
token; ``/metrics`` does not, unless the operator opened it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from tests.proxy.conftest import grid, serve_proxy
from visus.cli import app as cli
from visus.models import get_model
from visus.models.prices import cost_usd
from visus.proxy import ProxyConfig

TOKEN = "metrics-test-token"
AUTH = {"x-visus-token": TOKEN, "x-api-key": "k"}


def _image(b64: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}


def _messages(model: str, *shots: str) -> dict[str, Any]:
    """A run of screenshot tool calls, each result one image."""
    messages: list[Any] = [{"role": "user", "content": "watch the screen"}]
    for n, b64 in enumerate(shots):
        call = {"type": "tool_use", "id": f"t{n}", "name": "screenshot", "input": {}}
        messages.append({"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": [_image(b64)]}
        messages.append({"role": "user", "content": [result]})
    return {"model": model, "max_tokens": 50, "messages": messages}


def _samples(text: str, family: str) -> dict[str, float]:
    """``family``'s samples by their ``model``/``event`` label (its _total series)."""
    found = {}
    for f in text_string_to_metric_families(text):
        if f.name == family:
            for s in f.samples:
                if not s.name.endswith("_created"):
                    key = s.labels.get("model") or s.labels.get("event") or s.labels.get("outcome")
                    found[key or ""] = s.value
    return found


def test_metrics_after_a_proxied_session_match_visus_usage(
    reference_url: str, tmp_path: Path
) -> None:
    # Over the models' edge (fitted: bytes saved; Claude bills its own downscale, so no
    # tokens), then two screens of which live_images=1 keeps one (tokens and dollars).
    big = grid(1, 2, 41, edge=3000).b64
    shots = (grid(2, 2, 44).b64, grid(2, 2, 45).b64)
    config = ProxyConfig(upstream=reference_url, token=TOKEN, data=tmp_path, live_images=1)
    used: dict[str, list[dict[str, int]]] = {}  # the usage each client received
    with serve_proxy(config) as url, httpx.Client(timeout=300) as http:
        for model in ("claude-sonnet-4-6", "claude-sonnet-4-6", "claude-haiku-4-5"):
            body = _messages(model, big, *shots)
            sent = http.post(f"{url}/v1/messages", json=body, headers=AUTH)
            assert sent.status_code == 200, sent.text
            used.setdefault(model, []).append(sent.json()["usage"])
        assert http.get(f"{url}/metrics").status_code == 401
        scraped = http.get(f"{url}/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        stats = http.get(f"{url}/stats", headers=AUTH).json()
        for probe in ("/healthz", "/readyz"):
            answer = http.get(f"{url}{probe}")
            assert (answer.status_code, answer.content) == (200, b"")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain; version=")
    text = scraped.text
    usd = _samples(text, "visus_proxy_saved_usd")
    assert set(usd) == {"claude-sonnet-4-6", "claude-haiku-4-5"}
    assert all(v > 0 for v in usd.values())
    assert _samples(text, "visus_proxy_model_requests") == {
        "claude-sonnet-4-6": 2,
        "claude-haiku-4-5": 1,
    }
    images = _samples(text, "visus_proxy_images")
    assert images["fitted"] == stats["images_fitted"]
    assert images["elided"] == stats["images_elided"] > 0
    assert images["refused"] == stats["image_rejections"] == 0
    assert sum(_samples(text, "visus_proxy_saved_bytes").values()) == stats["bytes_saved"]
    assert _samples(text, "visus_http_requests")  # the request counter, by route and outcome
    # What `visus usage --proxy` reads back from the ledger the proxy wrote at shutdown.
    result = CliRunner().invoke(cli, ["usage", "--proxy", "--json", "--data", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    (day,) = report["days"].values()
    for model, dollars in usd.items():
        assert day[model]["usd_saved"] == pytest.approx(dollars, abs=1e-7)
        assert day[model]["added_seconds"] > 0
    assert report["total"]["usd_saved"] == pytest.approx(sum(usd.values()), abs=1e-7)
    # What the upstream said the requests used: /metrics, /stats and the ledger agree
    # with what the clients received, priced as visus usage prices.
    spent = _samples(text, "visus_proxy_spent_usd")
    tokens = _used_tokens(text)
    for model, usages in used.items():
        prompt = sum(u["input_tokens"] + u["cache_read_input_tokens"] for u in usages)
        prompt += sum(u["cache_creation_input_tokens"] for u in usages)
        output = sum(u["output_tokens"] for u in usages)
        dollars = sum(_priced(model, u) for u in usages)
        assert tokens[model, "input"] == day[model]["input_tokens"] == prompt
        assert tokens[model, "output"] == day[model]["output_tokens"] == output
        assert spent[model] == pytest.approx(dollars) == day[model]["usd_spent"]
    assert stats["input_tokens"] == sum(tokens[m, "input"] for m in used)
    text_report = CliRunner().invoke(cli, ["usage", "--proxy", "--data", str(tmp_path)])
    assert "claude-haiku-4-5" in text_report.output
    assert "total:" in text_report.output
    assert f"used {report['total']['input_tokens']} in" in text_report.output


def _used_tokens(text: str) -> dict[tuple[str, str], float]:
    """``visus_proxy_used_tokens`` by (model, kind)."""
    return {
        (s.labels["model"], s.labels["kind"]): s.value
        for f in text_string_to_metric_families(text)
        if f.name == "visus_proxy_used_tokens"
        for s in f.samples
        if not s.name.endswith("_created")
    }


def _priced(model: str, usage: dict[str, int]) -> float:
    read, write = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
    return cost_usd(
        get_model(model),
        input_tokens=usage["input_tokens"] + read + write,
        output_tokens=usage["output_tokens"],
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def test_an_opened_metrics_endpoint_and_restarts_adding_up(
    reference_url: str, tmp_path: Path
) -> None:
    big = grid(1, 2, 43, edge=3000)
    config = ProxyConfig(upstream=reference_url, token=TOKEN, data=tmp_path, open_metrics=True)
    for _ in range(2):  # two runs of the proxy on one data folder: the ledger adds up
        with serve_proxy(config) as url:
            body = _messages("claude-sonnet-4-6", big.b64)
            assert httpx.post(f"{url}/v1/messages", json=body, headers=AUTH, timeout=300)
            assert httpx.get(f"{url}/metrics").status_code == 200  # no token needed
            assert httpx.get(f"{url}/stats").status_code == 401  # the rest still does
    ledger = json.loads((tmp_path / "proxy" / "ledger.json").read_text())
    (day,) = ledger["days"].values()
    assert day["claude-sonnet-4-6"]["requests"] == 2
