"""DESIGN.md's one-way flow, checked on the source with ``ast``.

Every ``import`` in ``src/visus`` counts: module level, inside functions (a lazy
import still creates the dependency) and under ``TYPE_CHECKING``. A top-level unit
(a package such as ``media/`` or a module such as ``net.py``) may import only the
units :data:`ALLOWED` lists for it; imports inside one unit are free. The table reads
top-down like DESIGN.md's pipeline: foundation -> media -> models -> perception ->
record -> retention -> wire -> providers -> the library around the agent -> agent ->
surfaces. Anything the table does not allow must be in :data:`EXCEPTIONS` with its
reason, or the test names the offending import (file, line).

Heavy decoders (Pillow, pypdfium2, resvg, Pygments, PyAV, pyvips) are imported only by ``media/``;
each provider SDK only by its provider module.
"""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "visus"

FOUNDATION = ("errors", "limits", "paths", "budget", "schema")
#: The pipeline's core, in DESIGN.md's order: each may import the ones before it.
#: ``models`` holds data (catalog, specs, token formulas); it sits right after
#: ``media`` because a spec carries a media ``Profile``, and everything from
#: perception on reads specs.
CORE = ("media", "models", "perception", "record", "retention", "wire", "providers")
#: What the agent builds on besides the core: the URL fetcher, ``visus.toml``
#: (which builds provider settings) and the attachment store whose tools the agent
#: registers; ``store`` (files or PostgreSQL: sessions, blobs, instances, the shared
#: tether ring) builds on record and hands its logs to whoever runs the agent.
#: ``telemetry`` (traces, metrics, logs, the savings ledger) maps record values and
#: prices to what an operator reads; everything that runs agents or serves calls it.
LIBRARY = (*FOUNDATION, *CORE, "net", "config", "attachments", "store", "telemetry")
#: The agent and everything below it: what a surface may use.
BASE = (*LIBRARY, "agent")


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` with the garbage collector held off.

    CPython 3.11.7 can raise "AST constructor recursion depth
    mismatch" when a finalizer (a framework's unclosed HTTP client, left by an earlier
    test) runs Python code in the middle of building the tree.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text(encoding="utf-8"), str(path))
    finally:
        if enabled:
            gc.enable()


def _below(unit: str) -> frozenset[str]:
    return frozenset(FOUNDATION + CORE[: CORE.index(unit)])


#: unit -> the units it may import (besides itself).
ALLOWED: Mapping[str, frozenset[str]] = {
    "__init__": frozenset(),  # ``visus`` itself: only the version
    **{name: frozenset() for name in FOUNDATION},
    # the process-wide memory budget: its bound (limits) and refusals (errors)
    "budget": frozenset(("errors", "limits")),
    # JSON Schema checks of a client's schema, its patterns under a time bound
    "schema": frozenset(("errors", "limits")),
    **{name: _below(name) for name in CORE},
    "net": frozenset(FOUNDATION),
    "config": frozenset((*FOUNDATION, *CORE)),
    "attachments": frozenset((*FOUNDATION, *CORE)),
    # where records live; it knows messages and blobs (record) and holds sessions'
    # attachments with the attachment store's own names and caps (attachments)
    "store": frozenset((*FOUNDATION, "record", "attachments")),
    # what an operator sees: record values as span attributes (images by digest),
    # prices (models) for the savings ledger; it knows no surface and no agent;
    # and the process's memory budget and render lanes (media) as gauges
    "telemetry": frozenset((*FOUNDATION, "media", "models", "record")),
    "agent": frozenset(LIBRARY),
    # surfaces
    "analyze": frozenset(BASE),  # its tools are agent tools (agent.tools.Tool)
    # tether runs any TurnRunner; frames and bounds are its own, images come as
    # media values. It must not know the agent (app.py adapts one to the other).
    # With a shared store (PostgreSQL) its ring and turn claims live in ``store``.
    # Its /metrics, health routes and request ids come from ``telemetry``.
    "tether": frozenset((*FOUNDATION, "media", "store", "telemetry")),
    "mcp_server": frozenset((*BASE, "analyze", "tether")),
    "web": frozenset((*BASE, "analyze", "tether")),
    "app": frozenset((*BASE, "analyze", "tether", "mcp_server", "web")),
    # the gateway talks tether; without a remote server it runs app's main app
    "telegram": frozenset((*BASE, "tether", "app")),
    # an HTTP proxy in front of a provider: it edits image parts with media (fit),
    # models (limits), retention (descriptors, chunking) and wire (each wire's caps and
    # hoisting rule), and serves like `visus serve` (tether's loopback guard, bind check);
    # its /mcp refuses a bad call as visus's MCP server does (mcp_server.refusals)
    "proxy": frozenset((*BASE, "tether", "mcp_server")),
    # every command group; `visus reference` serves the reference model
    "cli": frozenset(
        (*BASE, "analyze", "tether", "mcp_server", "web", "app", "telegram", "reference", "proxy")
    ),
    # reference/ is a test peer standing in for an outside provider: it may use
    # media (to render documents it is sent) and models (token counts, model ids),
    # nothing of the pipeline it is there to test.
    "reference": frozenset((*FOUNDATION, "media", "models")),
    # adapters into other agent frameworks: the agent's tools, retention and blobs,
    # driven by the framework's own loop (each framework only in its own module).
    "integrations": frozenset(BASE),
}

#: (importing module, imported unit) -> why this edge against the table is intended.
EXCEPTIONS: Mapping[tuple[str, str], str] = {
    (
        "visus.agent.runtime",
        "reference",
    ): "build_agent serves the offline `reference` provider in-process when it is chosen"
    " (lazy; reference imports nothing above models, so no cycle)",
}

#: third-party top-level name -> the paths (relative to src/visus) that may import it.
THIRD_PARTY: Mapping[str, tuple[str, ...]] = {
    # reference/ stands in for an outside service and measures pixels with Pillow.
    "PIL": ("media/", "reference/"),
    "pypdfium2": ("media/",),
    "resvg_py": ("media/",),
    # libvips, locked down for untrusted input in one module (loaders blocked).
    "pyvips": ("media/_vips.py",),
    "pygments": ("media/",),
    "av": ("media/",),
    "openai": ("providers/openai_client.py",),
    "anthropic": ("providers/anthropic_client.py",),
    "google.genai": ("providers/gemini_client.py",),
    "ollama": ("providers/ollama_client.py",),
    "boto3": ("providers/bedrock_client.py",),
    "botocore": ("providers/bedrock_client.py",),
    "telegram": ("telegram/",),
    # the server side, and the client side the agent mounts other servers with
    "mcp": ("mcp_server/", "agent/mcp_client.py", "proxy/mcp.py"),
    "typer": ("cli/",),
    "psycopg": ("store/postgres.py", "store/pg_"),
    "psycopg_pool": ("store/pg_conn.py",),
    "pydantic_ai": ("integrations/pydantic_ai.py",),
    "agents": ("integrations/openai_agents.py",),
    "langchain": ("integrations/langchain.py",),
    "langchain_core": ("integrations/langchain.py",),
    "langgraph": ("integrations/langchain.py",),
    # traces and metrics are telemetry's alone: every other unit calls its hooks
    "opentelemetry": ("telemetry/",),
    "prometheus_client": ("telemetry/",),
}


@dataclass(frozen=True, slots=True)
class Import:
    """One imported module name, where it is imported."""

    module: str  # importing module, dotted
    path: str  # relative to src/visus
    line: int
    target: str  # imported module (or module.name for ``from m import name``)

    def __str__(self) -> str:
        return f"{self.module} (src/visus/{self.path}:{self.line}) imports {self.target}"


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    """Dotted name of ``path`` under the package directory ``root``; is it a package."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imports_of(path: Path, root: Path) -> Iterator[Import]:
    """Every import in the file, at any depth, relative ones resolved."""
    module, is_package = module_name(path, root)
    rel = path.relative_to(root).as_posix()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, rel, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from visus import media`` imports the unit ``media``.
                yield Import(module, rel, node.lineno, f"{source}.{alias.name}")


def unit_of(dotted: str) -> str:
    """``visus.media.load`` -> ``media``; ``visus`` / ``visus.__version__`` -> ``__init__``."""
    parts = dotted.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def all_imports(root: Path = SRC) -> list[Import]:
    return [i for p in sorted(root.rglob("*.py")) for i in imports_of(p, root)]


def layer_violations(
    imports: list[Import],
    allowed: Mapping[str, frozenset[str]] = ALLOWED,
    exceptions: Mapping[tuple[str, str], str] = EXCEPTIONS,
    units: frozenset[str] | None = None,
) -> list[str]:
    """Imports of a visus unit the importing unit may not use, as readable lines."""
    package = SRC.name
    known = units if units is not None else _units(SRC)
    out = []
    seen: set[tuple[str, int, str]] = set()
    for imp in imports:
        if imp.target.split(".")[0] != package:
            continue
        src, dst = unit_of(imp.module), unit_of(imp.target)
        if dst not in known:  # ``from visus import __version__``: the root holds no logic
            continue
        if src == dst or (imp.module, dst) in exceptions or (imp.path, imp.line, dst) in seen:
            continue
        seen.add((imp.path, imp.line, dst))  # one line per statement, not per name
        if src not in allowed:
            out.append(f"{imp}: unit {src!r} has no row in ALLOWED; place it in a layer")
        elif dst not in allowed[src]:
            out.append(f"{imp}: {src!r} may not import {dst!r} (layer table in this test)")
    return out


def third_party_violations(
    imports: list[Import], owners: Mapping[str, tuple[str, ...]] = THIRD_PARTY
) -> list[str]:
    """Imports of a guarded third-party package outside the paths that own it."""
    out = []
    for imp in imports:
        for name, paths in owners.items():
            hit = imp.target == name or imp.target.startswith(name + ".")
            if hit and not any(imp.path.startswith(p) for p in paths):
                out.append(f"{imp}: only {', '.join(paths)} may import {name}")
    return out


def _units(root: Path) -> frozenset[str]:
    names = {p.stem for p in root.glob("*.py")} | {
        p.parent.name for p in root.glob("*/__init__.py")
    }
    return frozenset(names)


# --- the checks -------------------------------------------------------------------


def test_every_unit_is_placed_in_the_table() -> None:
    missing = sorted(_units(SRC) - set(ALLOWED))
    assert not missing, f"units without a row in ALLOWED: {missing}"
    stale = sorted(set(ALLOWED) - _units(SRC))
    assert not stale, f"ALLOWED rows for units that no longer exist: {stale}"


def _design_layers() -> list[tuple[str, str]]:
    """(layer, unit) of each row of docs/DESIGN.md's "Layers" table, in order."""
    text = (SRC.parents[1] / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ")]
    return [(layer.strip(), unit.strip().strip("`")) for layer, unit in rows[2:]]


def test_design_names_every_unit_in_its_layer() -> None:
    """docs/DESIGN.md's picture of the layers stays true to this table: every unit once,
    in the layer the table gives it, the core in its import order."""
    rows = _design_layers()
    units = [unit for _, unit in rows]
    assert sorted(units) == sorted(_units(SRC) - {"__init__"})
    layers = {unit: layer for layer, unit in rows}
    expected = {
        **dict.fromkeys(FOUNDATION, "foundation"),
        **dict.fromkeys(CORE, "core"),
        **{u: "library" for u in LIBRARY if u not in FOUNDATION + CORE},
        "agent": "agent",
        "reference": "test peer",
    }
    for unit in units:
        assert layers[unit] == expected.get(unit, "surface"), unit
    assert [u for u in units if layers[u] == "core"] == list(CORE)


def test_the_table_is_one_way() -> None:
    """No cycle in the allowed graph: the table itself describes a layering."""
    state: dict[str, int] = {}

    def visit(unit: str, trail: tuple[str, ...]) -> None:
        if state.get(unit) == 2:
            return
        assert state.get(unit) != 1, f"cycle in ALLOWED: {' -> '.join((*trail, unit))}"
        state[unit] = 1
        for dep in sorted(ALLOWED[unit]):
            visit(dep, (*trail, unit))
        state[unit] = 2

    for unit in sorted(ALLOWED):
        visit(unit, ())


def test_imports_follow_the_layers() -> None:
    bad = layer_violations(all_imports())
    assert not bad, "imports against DESIGN.md's one-way flow:\n" + "\n".join(bad)


def test_exceptions_are_still_needed() -> None:
    """An exception nobody uses any more is removed, so the list stays true."""
    used = {(i.module, unit_of(i.target)) for i in all_imports()}
    stale = sorted(k for k in EXCEPTIONS if k not in used)
    assert not stale, f"exceptions no import needs any more: {stale}"


def test_third_party_packages_stay_in_their_module() -> None:
    bad = third_party_violations(all_imports())
    assert not bad, "third-party imports outside their owner:\n" + "\n".join(bad)


def test_models_holds_data_only() -> None:
    """models/ may read media's value types, never media's decoders."""
    targets = {i.target for i in all_imports() if i.path.startswith("models/")}
    from_media = {t for t in targets if unit_of(t) == "media" and t.startswith("visus.")}
    assert from_media <= {"visus.media.types.DEFAULT_MEDIA_TYPES", "visus.media.types.Profile"}


# --- the checker itself catches what it should --------------------------------------


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "visus"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_checker_names_a_lazy_upward_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "media/__init__.py": "",
            "media/load.py": "import os\n\n\ndef f():\n    from visus.agent import loop\n",
            "agent/__init__.py": "from visus.media import load\n",
        },
    )
    bad = layer_violations(all_imports(root), units=_units(root))
    assert bad == [
        "visus.media.load (src/visus/media/load.py:5) imports visus.agent.loop: "
        "'media' may not import 'agent' (layer table in this test)"
    ]


def test_checker_resolves_relative_imports(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "record/__init__.py": "from .. import wire\n",
            "record/codec.py": "from ..retention import model_view\nfrom . import blobs\n",
            "wire/__init__.py": "",
            "retention.py": "",
        },
    )
    bad = layer_violations(all_imports(root), units=_units(root))
    assert len(bad) == 2
    assert bad[0].startswith("visus.record (src/visus/record/__init__.py:1) imports visus.wire")
    assert "visus.record.codec (src/visus/record/codec.py:1) imports visus.retention" in bad[1]


def test_checker_flags_an_sdk_outside_its_provider(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "providers/openai_client.py": "import openai\n",
            "wire/openai_chat.py": "from openai.types import chat\n",
            "media/raster.py": "from PIL import Image\n",
            "agent/tools.py": "if True:\n    import PIL.Image\n",
            "providers/gemini_client.py": "from google import genai\n",
            "analyze/video.py": "from google.genai import types\n",
        },
    )
    bad = third_party_violations(all_imports(root))
    assert len(bad) == 3  # sorted by path
    assert "src/visus/agent/tools.py:2" in bad[0]
    assert "only media/, reference/" in bad[0]
    assert "src/visus/analyze/video.py:1" in bad[1]
    assert "google.genai" in bad[1]
    assert "src/visus/wire/openai_chat.py:1" in bad[2]
    assert "may import openai" in bad[2]


@pytest.mark.parametrize("unit", CORE)
def test_core_layers_never_reach_the_agent_or_surfaces(unit: str) -> None:
    """A spot check in words, independent of how the table is built."""
    assert not ALLOWED[unit] & {"agent", "analyze", "tether", "cli", "app", "web"}


# --- one provider, one place ---------------------------------------------------------

#: Each provider's own protocol words (reply fields, stream events, request knobs): they
#: may appear only in its codec (``wire/<name>.py``, and ``wire/<name>_replies.py`` where
#: the codec's reply side is a module of its own) and its transport
#: (``providers/<name>_client.py``). ``reference/`` stands in for the providers (an
#: independent oracle) and ``proxy/`` edits their request bodies in flight (a module
#: per provider protocol): both may spell them all.
PROVIDER_WORDS: Mapping[tuple[str, ...], tuple[str, ...]] = {
    ("wire/anthropic.py", "wire/anthropic_replies.py", "providers/anthropic_client.py"): (
        "content_block_delta",
        "input_json_delta",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ),
    ("wire/openai_chat.py", "providers/openai_client.py"): (
        "finish_reason",
        "completion_tokens",
        "max_completion_tokens",
    ),
    ("wire/openai_responses.py", "providers/openai_client.py"): (
        "function_call_output",
        "incomplete_details",
        "output_text",
        "encrypted_content",
        "response.output_text.delta",
    ),
    ("wire/gemini.py", "providers/gemini_client.py"): (
        "finishReason",
        "usageMetadata",
        "thoughtSignature",
        "functionResponse",
        "maxOutputTokens",
        "promptFeedback",
    ),
    ("wire/ollama.py", "providers/ollama_client.py"): (
        "done_reason",
        "prompt_eval_count",
        "num_predict",
    ),
    ("wire/bedrock.py", "wire/bedrock_replies.py", "providers/bedrock_client.py"): (
        "toolUseId",
        "stopReason",
        "inferenceConfig",
        "contentBlockDelta",
    ),
}

#: (path, word) -> why that provider word lives outside its codec and transport.
WORD_EXCEPTIONS: Mapping[tuple[str, str], str] = {
    (
        "integrations/items.py",
        "function_call_output",
    ): "the OpenAI Agents SDK hands its history over as Responses input items; the"
    " integration edits that framework's own items (items.py, for openai_agents.py),"
    " not a request visus lowers",
    (
        "integrations/items.py",
        "encrypted_content",
    ): "the Agents SDK's own reasoning items: the reasoning an eviction would drop is"
    " what their encrypted content holds (no usage rides on an item)",
    (
        "telemetry/names.py",
        "finish_reason",
    ): "the OpenTelemetry GenAI conventions name an attribute gen_ai.response.finish_reasons",
    (
        "telemetry/parts.py",
        "finish_reason",
    ): "the conventions' gen_ai.output.messages schema has a finish_reason field",
}


def provider_word_violations(root: Path) -> list[str]:
    """Every provider word found in a file that is not its provider's codec or transport."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("reference/", "proxy/")):
            continue
        text = path.read_text()
        for owners, words in PROVIDER_WORDS.items():
            for word in words:
                if word in text and rel not in owners and (rel, word) not in WORD_EXCEPTIONS:
                    bad.append(f"src/visus/{rel} says {word!r}; only {' and '.join(owners)} may")
    return bad


def test_provider_words_stay_in_their_codec_and_transport() -> None:
    assert provider_word_violations(SRC) == []


def test_word_exceptions_are_still_needed() -> None:
    for path, word in WORD_EXCEPTIONS:
        assert word in (SRC / path).read_text(), f"{path} no longer says {word}; drop it"


def test_checker_flags_a_provider_word_elsewhere(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "wire/gemini.py": "X = 'finishReason'\n",
            "agent/loop.py": "if reply['finishReason'] == 'MAX_TOKENS': pass\n",
            "reference/wire_gemini.py": "X = 'finishReason'\n",
        },
    )
    bad = provider_word_violations(root)
    assert bad == [
        "src/visus/agent/loop.py says 'finishReason'; only wire/gemini.py and "
        "providers/gemini_client.py may"
    ]


# --- request and reply shapes are typed (issue 14) ------------------------------------

#: Where ``Any`` may still appear in an annotation in wire/ and providers/, and why.
ANY_EXCEPTIONS: Mapping[tuple[str, str], str] = {
    ("providers/base.py", "sdk_fields"): "the one hand-over of a typed body to an SDK's **kwargs",
    ("providers/openai_client.py", "_fields"): "sdk_fields, with max_tokens renamed",
    ("providers/bedrock_client.py", "__init__"): "boto3 builds its clients at run time",
}


class _AnyFinder(ast.NodeVisitor):
    """Every annotation saying ``Any``, with the function it is in (``<module>``)."""

    def __init__(self) -> None:
        self.scope = ["<module>"]
        self.found: list[tuple[str, ast.expr]] = []

    def _check(self, ann: ast.expr | None) -> None:
        if ann is not None and any(
            isinstance(n, ast.Name) and n.id == "Any" for n in ast.walk(ann)
        ):
            self.found.append((self.scope[-1], ann))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)  # its signature counts as inside it
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            self._check(arg.annotation if arg else None)
        self._check(node.returns)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check(node.annotation)


def any_violations(root: Path) -> list[str]:
    """Annotations in wire/ and providers/ that say ``Any``, outside :data:`ANY_EXCEPTIONS`."""
    bad: list[str] = []
    for package in ("wire", "providers"):
        for path in sorted((root / package).glob("*.py")):
            rel = path.relative_to(root).as_posix()
            finder = _AnyFinder()
            finder.visit(_parse(path))
            bad += [
                f"src/visus/{rel}:{ann.lineno} ({scope}): {ast.unparse(ann)}"
                for scope, ann in finder.found
                if (rel, scope) not in ANY_EXCEPTIONS
            ]
    return bad


def test_wire_and_providers_annotate_no_any() -> None:
    assert any_violations(SRC) == []


def test_any_exceptions_are_still_needed() -> None:
    for path, func in ANY_EXCEPTIONS:
        text = (SRC / path).read_text(encoding="utf-8")
        assert f"def {func}(" in text, f"{path} has no {func}; drop its exception"


def test_checker_flags_a_dict_of_any_body(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "wire/x.py": "from typing import Any\ndef build(p: object) -> dict[str, Any]:\n"
            "    out: dict[str, Any] = {}\n    return out\n",
            "providers/y.py": "def ok(b: dict[str, object]) -> None: ...\n",
        },
    )
    assert any_violations(root) == [
        "src/visus/wire/x.py:2 (build): dict[str, Any]",
        "src/visus/wire/x.py:3 (build): dict[str, Any]",
    ]


# --- no import circles between modules (issue 29) -------------------------------------


def module_graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module -> the modules of ``root``'s package it imports (at any depth, lazy and
    ``TYPE_CHECKING`` ones too). ``from visus.store import X`` is an edge to the module
    ``visus.store.X`` when there is one, else to the package ``visus.store`` (its
    ``__init__``), whose own imports then count."""
    modules = {module_name(p, root)[0] for p in root.rglob("*.py")}

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in all_imports(root):
        found = resolve(imp.target)
        if found is not None and found != imp.module:
            graph[imp.module].add(found)
    return graph


def import_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every import circle, as the modules of one strongly connected component
    (Tarjan's algorithm), sorted; each cycle drawn once."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_no_module_imports_itself_in_a_circle() -> None:
    """Each package has a bottom (its protocol and value types) that imports none of
    its implementations, and a factory above them: no module reaches itself again."""
    cycles = import_cycles(module_graph())
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_checker_finds_a_circle_through_a_package_face(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "store/__init__.py": "from visus.store.base import Store\n",
            "store/base.py": "def open_store():\n    from visus.store.files import FileStore\n",
            "store/files.py": "from visus.store import Store\n",
            "tether/__init__.py": "",
            "tether/a.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from visus.tether.b import B\n",
            "tether/b.py": "from visus.tether import a\n",
            "tether/c.py": "from visus.tether.b import B\n",
        },
    )
    assert import_cycles(module_graph(root)) == [
        ["visus.store", "visus.store.base", "visus.store.files"],
        ["visus.tether.a", "visus.tether.b"],
    ]
