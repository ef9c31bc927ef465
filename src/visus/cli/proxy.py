"""``visus proxy``: put visus's image handling in front of any agent's provider."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from visus.cli._common import DataOpt, LogFormatOpt, OpenMetricsOpt

if TYPE_CHECKING:
    from visus.proxy import ProxyConfig


UpstreamOpt = Annotated[
    str | None,
    typer.Option(
        help="Provider base URL to forward to, e.g. https://api.anthropic.com "
        "(default: \\[proxy] upstream in visus.toml)"
    ),
]
LiveTurnsOpt = Annotated[
    int | None,
    typer.Option(
        "--live-turns",
        min=1,
        help="Keep images of the last N user turns only; older ones become descriptors. "
        "The forwarded prefix changes when a turn leaves (once per user message) "
        "(default: off, every image is kept)",
    ),
]
LiveImagesOpt = Annotated[
    int | None,
    typer.Option(
        "--live-images",
        min=1,
        help="Keep at most N images live in a long run; past N the oldest leave in one "
        "batch (all but the newest, or --chunk), so the forwarded prefix, and the "
        "provider's prompt cache, changes once every N images, not at every step "
        "(default: off; images then stay until the provider's limit, where the oldest "
        "quarter leaves at once)",
    ),
]
ChunkOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Move the windows N turns / N images at a time (default: 1 turn; the whole "
        "--live-images window). A smaller batch keeps more images live but rewrites "
        "the cached prefix more often",
    ),
]
WeighReasoningOpt = Annotated[
    bool,
    typer.Option(
        "--weigh-reasoning",
        help="For a model that binds its reasoning (Claude 5.5, GPT-5.6+), hold the first "
        "eviction past the break-even until the reads cover the reasoning it drops "
        "(cheaper for short runs of heavy reasoning; default off: benchmarks/RESULTS.md)",
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        envvar="VISUS_PROXY_TOKEN",
        help="Token clients send in x-visus-token (required beyond loopback)",
    ),
]


def proxy(
    upstream: UpstreamOpt = None,
    host: Annotated[
        str | None, typer.Option(help="Address to listen on (default 127.0.0.1)")
    ] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port to listen on (default 8790)")
    ] = None,
    live_turns: LiveTurnsOpt = None,
    live_images: LiveImagesOpt = None,
    chunk: ChunkOpt = None,
    token: TokenOpt = None,
    data: DataOpt = None,
    open_metrics: OpenMetricsOpt = False,
    weigh_reasoning: WeighReasoningOpt = False,
    log_format: LogFormatOpt = "text",
) -> None:
    """Serve Anthropic Messages, OpenAI Chat Completions and Responses in front of UPSTREAM.

    Point an agent's base URL here (Claude Code: ANTHROPIC_BASE_URL=http://127.0.0.1:8790;
    an OpenAI client: base URL http://127.0.0.1:8790/v1). Requests keep the client's
    own API key; only image parts are edited.
    """
    from visus.cli._common import check_listen, config, data_root, fail
    from visus.errors import VisusError
    from visus.proxy import UVICORN_OPTIONS, ProxyConfig, create_proxy_app
    from visus.telemetry.logs import register_secret, setup_logging
    from visus.tether.server import is_loopback, tether_server

    settings = config().proxy
    upstream = upstream or settings.upstream
    if not upstream:
        fail("proxy: no upstream; pass --upstream URL or set [proxy] upstream in visus.toml")
    host = host or settings.host
    port = port or settings.port
    token = token or (settings.token.get_secret_value() if settings.token else None)
    if not token and not is_loopback(host):
        fail(
            f"proxy: refusing to listen on {host!r} without a token; set VISUS_PROXY_TOKEN "
            "(or --token, or [proxy] token) and send it in x-visus-token, or bind 127.0.0.1"
        )
    if log_format not in ("text", "json"):
        fail(f"proxy: --log-format is text or json, not {log_format!r}")
    # Before the app (and its /mcp) is built: the MCP SDK configures logging otherwise,
    # a rich handler that wraps every line of a log file at 80 columns.
    setup_logging("json" if log_format == "json" else "text")
    try:
        proxied = ProxyConfig(
            upstream=upstream,
            live_turns=live_turns or settings.live_turns,
            live_images=live_images or settings.live_images,
            chunk=chunk or settings.chunk,
            token=token,
            data=data_root(data),
            open_metrics=open_metrics,
            weigh_reasoning=weigh_reasoning,
        )
        app = create_proxy_app(proxied)
    except VisusError as e:
        fail(str(e))
    check_listen(host, port)
    register_secret(token)
    _banner(proxied, host, port)
    server = tether_server(
        app,
        host=host,
        port=port,
        log_level="warning",
        log_config=None,
        access_log=False,
        **UVICORN_OPTIONS,
    )
    server.run()


def _banner(proxied: ProxyConfig, host: str, port: int) -> None:
    """What ``visus proxy`` prints at start: where it listens, what it keeps, its stats."""
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    typer.echo(f"visus proxy · {base} -> {proxied.upstream}")
    window, count = proxied.live_turns, proxied.live_images
    kept = ([f"last {window} turn(s)"] if window else []) + (
        [f"at most {count} images, {proxied.image_batch} leaving at a time"] if count else []
    )
    limit = "the oldest leave in one batch at the provider's limit"
    typer.echo(f"  retention  {', '.join(kept) if kept else 'off'}; {limit}")
    # What to point clients at (README: "Any agent, one base URL"), said where it runs.
    typer.echo(f"  clients    ANTHROPIC_BASE_URL={base}  OPENAI_BASE_URL={base}/v1")
    if proxied.token:
        typer.echo("  token      clients send it in the x-visus-token header")
    typer.echo(f"  mcp        {base}/mcp  (restore_image: an image the proxy left out)")
    typer.echo(f"  stats      {base}/stats  {base}/metrics  (savings: visus usage --proxy)")
    typer.echo(f"  health     {base}/healthz  {base}/readyz")


def register(app: typer.Typer) -> None:
    from visus.cli._help import SERVE

    app.command("proxy", rich_help_panel=SERVE)(proxy)
