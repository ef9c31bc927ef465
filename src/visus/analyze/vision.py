"""vision_analyze: one question about up to four images or PDFs, one envelope back.

The model is the call's ``model``, else ``auxiliary.vision.model`` from the
configuration, else its ``default_model``; the auxiliary provider, key and base URL
default to the main ones. The catalog gates the model (an unknown model cannot see,
so it is ``VISION_NOT_SUPPORTED``). Images are fitted to the model. PDFs go natively
(a document part) to models that take them (``ModelSpec.pdf``) on a wire that
carries documents, when no page range is asked; past the provider's page cap that is
``PDF_TOO_MANY_PAGES``, and a PDF over the wire's byte cap for one document is sent
as rendered pages instead. Vision-only models (and page ranges) get rendered pages,
at most ``limits.ANALYZE_MAX_PDF_PAGES``. With ``format`` the answer must validate against a
JSON Schema; the model is asked once more, with the validation error, before
``RESPONSE_NOT_JSON``. Answers longer than ``limits.ANALYZE_MAX_RESULT_CHARS``
are clipped with a marker.

Example:
    >>> import asyncio, tempfile, pathlib
    >>> from visus.perception import Reach
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> asyncio.run(vision_analyze("what is this?", file_path="nope.png",
    ...                            reach=Reach([root])))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    visus.errors.AnalyzeError: FILE_NOT_FOUND: nope.png: 'nope.png' does not exist
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from visus import limits
from visus.analyze._inputs import (
    Document,
    Loaded,
    Picture,
    load_source,
    native_document,
    pictures,
)
from visus.analyze._schema import find_json, instructions, normalise_format, retry_prompt
from visus.analyze._values import AnalyzeCode, AnalyzeResult, FileSource, fail
from visus.analyze.cache import AnalyzeCache, cache_key
from visus.config import VisusConfig, load_config
from visus.errors import AnalyzeError, AuthError, ConfigError, PolicyError, VisusError
from visus.models import ModelSpec, get_model, parse_model_ref
from visus.models.allowed import AllowedModels
from visus.paths import sessions_dir
from visus.perception import Reach
from visus.providers import ProviderClient, ProviderSettings, aclose, resolve
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    DocumentPart,
    ImagePart,
    Message,
    ModelRequest,
    Part,
    TextPart,
    Usage,
    UserMessage,
)
from visus.record.sessions import SessionStore, validate_session_id
from visus.wire import WIRES, Wire, max_document_pages

__all__ = [
    "SYSTEM_PROMPT",
    "Recording",
    "Target",
    "UsageSink",
    "allowed_model",
    "ask_model",
    "check_session",
    "connect",
    "default_reach",
    "record_usage",
    "resolve_target",
    "vision_analyze",
    "vision_analyze_sync",
]

#: Called with the cost of each model call, also when the analyze call then fails.
UsageSink = Callable[[Usage], None]

SYSTEM_PROMPT = (
    "You answer one question about the files shown (images, PDF documents, rendered PDF "
    "pages or video frames). Answer from what you see; say so when something is not visible."
)


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """The resolved model: its reference, catalog entry, and the provider settings."""

    ref: str
    spec: ModelSpec
    settings: ProviderSettings


def resolve_target(model: str | None, config: VisusConfig) -> Target:
    """Apply the model chain: ``model`` > ``auxiliary.vision.model`` > ``default_model``.

    The auxiliary provider, key and base URL apply when the model comes from the
    configuration (they default to the main provider's).

    Example:
        >>> from visus.config import load_config
        >>> resolve_target(None, load_config(env={})).spec.name
        'reference'
    """
    config.register_models()
    settings = config.provider_settings()
    try:
        if model is not None:
            if not isinstance(model, str) or not model.strip():
                raise fail("INVALID_INPUT", "model must be a non-empty string")
            ref = model.strip()
        else:
            aux = config.auxiliary.vision
            chosen = config.vision_target()
            provider, name = parse_model_ref(chosen.model)
            ref = chosen.model
            if aux.provider and aux.provider != provider:
                provider, ref = aux.provider, f"{aux.provider}:{name}"
            keys, urls = dict(settings.api_keys), dict(settings.base_urls)
            if chosen.api_key:
                keys[provider] = chosen.api_key
            if chosen.base_url:
                urls[provider] = chosen.base_url
            settings = dataclasses.replace(settings, api_keys=keys, base_urls=urls)
        spec = get_model(ref)
    except AnalyzeError:
        raise
    except VisusError as e:
        raise fail("VISION_NOT_SUPPORTED", f"cannot resolve model {model!r}: {e}") from e
    return Target(ref=ref, spec=spec, settings=settings)


def allowed_model(
    model: str | None, config: VisusConfig, models: AllowedModels | None
) -> str | None:
    """The model an analyze call asks, where an operator lists the models clients may
    pick (``models``; each answer is paid with the operator's keys): ``model`` when
    listed (else :class:`~visus.errors.PolicyError` naming the list); without one, the
    configured default (``None``) when listed, else the first listed model that takes
    images. Unlisted, the default is never used: a server allowing only ``reference``
    spent the environment's provider key on every ``vision_analyze`` without a model.

    Example:
        >>> from visus.config import load_config
        >>> cfg = load_config(env={"ANTHROPIC_API_KEY": "k"})
        >>> allowed_model(None, cfg, AllowedModels.of(["reference"]))
        'reference'
        >>> allowed_model(None, cfg, None) is None
        True
    """
    if models is None:
        return model
    if model is not None:
        models.check(model)
        return model
    if models.any:
        return None
    with contextlib.suppress(AnalyzeError):
        if models.allows(resolve_target(None, config).ref):
            return None
    for ref in models.refs:
        with contextlib.suppress(VisusError):
            if get_model(ref).vision:
                return ref
    raise PolicyError(
        f"model: the configured vision model is not one this server's operator lets "
        f"clients use, and none of those allowed ({', '.join(models.refs) or 'none'}) "
        "takes images ([server] models in visus.toml)"
    )


async def connect(target: Target, *, unavailable: AnalyzeCode) -> ProviderClient:
    """A client for ``target``; ``reference`` gets the in-process server when no URL is set.

    A missing key is ``LLM_ERROR``; a provider that cannot be set up (no base URL,
    unknown provider) is ``unavailable`` (``VISION_NOT_SUPPORTED`` or
    ``VIDEO_NOT_SUPPORTED``).
    """
    settings = target.settings
    ref = target.ref
    provider, name = parse_model_ref(ref)
    if provider == "reference":
        if not settings.url("reference"):
            from visus.agent.runtime import ensure_reference_server

            url = await asyncio.to_thread(ensure_reference_server)
            settings = dataclasses.replace(settings, reference_url=url)
        if name not in WIRES:
            # ``reference:<wire>`` picks a wire; a named variant (``reference-pdf``) is
            # the same server on the default wire, its spec (target.spec) from the catalog.
            ref = "reference"
    try:
        client, _ = resolve(ref, config=settings)
    except AuthError as e:
        raise fail("LLM_ERROR", f"{target.ref}: {e}") from e
    except ConfigError as e:
        raise fail(unavailable, f"no provider for {target.ref}: {e}") from e
    return client


def _sources(
    file_path: str | None,
    file_url: str | None,
    file_base64: str | None,
    files: Sequence[FileSource | Mapping[str, Any]] | None,
) -> list[FileSource]:
    single = any(v is not None for v in (file_path, file_url, file_base64))
    if files is not None:
        if single:
            raise fail("INVALID_INPUT", "give files=[...] or one file_* source, not both")
        items: object = files
        if isinstance(items, str | bytes) or not isinstance(items, Sequence):
            raise fail("INVALID_INPUT", "files must be a list of sources")
        if not 1 <= len(files) <= limits.ANALYZE_MAX_FILES:
            raise fail(
                "INVALID_INPUT",
                f"files holds {len(files)} entries; 1 to {limits.ANALYZE_MAX_FILES} allowed",
            )
        return [FileSource.from_mapping(f) for f in files]
    return [FileSource.of(file_path=file_path, file_url=file_url, file_base64=file_base64)]


def _check_prompt(prompt: object) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise fail("INVALID_INPUT", "prompt must be a non-empty string")
    return prompt


async def ask_model(
    client: ProviderClient,
    spec: ModelSpec,
    pics: Sequence[Picture | Document],
    prompt: str,
    schema: Mapping[str, Any] | None,
    *,
    on_usage: UsageSink | None = None,
) -> tuple[str, Any, Usage]:
    """Send the pictures (and native documents) and the prompt; with a schema, retry
    once on a bad answer.

    Returns ``(text, parsed, usage)``; ``usage`` sums every call made.
    """
    blobs = MemoryBlobStore()
    parts: list[Part] = []
    for pic in pics:
        digest = blobs.put(pic.data, pic.media_type)
        parts.append(TextPart(pic.caption))
        size = len(pic.data)
        if isinstance(pic, Document):
            origin = AttachmentOrigin(filename=pic.filename)
            parts.append(DocumentPart(digest, pic.media_type, size, pic.page_count, origin))
            continue
        origin = AttachmentOrigin(filename=pic.caption)
        parts.append(ImagePart(digest, pic.media_type, size, pic.width, pic.height, origin))
    question = prompt if schema is None else f"{prompt}\n\n{instructions(schema)}"
    messages: list[Message] = [UserMessage(parts=(*parts, TextPart(question)), turn=1)]
    total = Usage()

    async def call() -> str:
        nonlocal total
        request = ModelRequest(messages=tuple(messages), system=SYSTEM_PROMPT)
        try:
            reply = await client.complete(request, model=spec, blobs=blobs)
        except VisusError as e:
            raise fail("LLM_ERROR", f"{spec.name}: {e}") from e
        if reply.usage is not None:
            total = total + reply.usage
            if on_usage is not None:
                on_usage(reply.usage)
        return reply.text

    text = await call()
    if schema is None:
        return text, None, total
    # Off the loop: the client's patterns may use the whole schema budget.
    value, problem = await asyncio.to_thread(find_json, text, schema)
    if problem is None:
        return text, value, total
    messages.append(AssistantMessage(parts=(TextPart(text or "(no answer)"),), model=spec.name))
    messages.append(UserMessage(parts=(TextPart(retry_prompt(problem)),), turn=1))
    text = await call()
    value, problem = await asyncio.to_thread(find_json, text, schema)
    if problem is not None:
        raise fail("RESPONSE_NOT_JSON", f"{spec.name} gave no valid JSON twice: {problem}")
    return text, value, total


def check_session(session: str | None) -> None:
    """Refuse a malformed session id before any model call is paid for."""
    if session is None:
        return
    try:
        validate_session_id(session)
    except VisusError as e:
        raise fail("INVALID_INPUT", str(e)) from e


def record_usage(
    sessions: SessionStore,
    session: str,
    *,
    tool: str,
    prompt: str,
    summary: str,
    text: str,
    model: str,
    usage: Usage,
) -> None:
    """Append the call as one turn (the ask, the answer with its usage) to ``session``.

    ``visus usage SESSION`` sums assistant usage per turn, so the cost is counted.
    """
    try:
        if not sessions.exists(session):
            sessions.create(session, meta={"model": model, "created_by": tool})
        turn = sessions.turn_count(session) + 1
        sessions.append(
            session, UserMessage(parts=(TextPart(f"[{tool}] {prompt}\n{summary}"),), turn=turn)
        )
        reply = AssistantMessage(
            parts=(TextPart(text),) if text else (), turn=turn, model=model, usage=usage
        )
        sessions.append(session, reply)
    except VisusError as e:
        raise fail("INVALID_INPUT", f"cannot record in session {session!r}: {e}") from e


async def vision_analyze(
    prompt: str,
    *,
    file_path: str | None = None,
    file_url: str | None = None,
    file_base64: str | None = None,
    files: Sequence[FileSource | Mapping[str, Any]] | None = None,
    model: str | None = None,
    format: Mapping[str, Any] | None = None,
    reach: Reach | None = None,
    config: VisusConfig | None = None,
    cache: AnalyzeCache | None = None,
    pages: tuple[int, int] | None = None,
    session: str | None = None,
    sessions: SessionStore | None = None,
    allow_loopback_http: bool = False,
    on_usage: UsageSink | None = None,
    client: ProviderClient | None = None,
) -> AnalyzeResult:
    """Answer ``prompt`` about one file (``file_path`` | ``file_url`` | ``file_base64``)
    or up to ``limits.ANALYZE_MAX_FILES`` (``files=[...]``).

    ``format`` is a JSON Schema (bare or ``{"type": "json_schema", "schema": ...}``);
    the result's ``parsed`` then holds the validated value. ``reach`` bounds
    ``file_path`` (default: the configuration's reach roots, else the working
    directory). ``pages`` (1-based, inclusive) picks PDF pages. ``cache`` remembers
    answers by file digests, prompt, model, schema and pages. ``session`` appends the
    call and its usage to that session (``sessions`` defaults to the data folder's).
    ``allow_loopback_http`` lets ``file_url`` be plain http to loopback (tests, local
    setups). ``on_usage`` sees each model call's usage, also when the call then
    fails. ``client`` replaces the provider client for the resolved model.

    Raises :class:`~visus.errors.AnalyzeError` whose text starts with its code.

    Example:
        >>> r = asyncio.run(vision_analyze("Describe it", file_path="shot.png"))  # doctest: +SKIP
        >>> r.to_dict()["text"]  # doctest: +SKIP
    """
    prompt = _check_prompt(prompt)
    check_session(session)
    sources = _sources(file_path, file_url, file_base64, files)
    schema = normalise_format(format) if format is not None else None
    cfg = config if config is not None else load_config()
    target = _vision_target(model, cfg)
    reach = reach if reach is not None else default_reach(cfg)
    loaded = await _load_all(sources, reach, allow_loopback_http)
    question = _Question(tuple(loaded), prompt, schema, render=reach.render, pages=pages)
    summary = "files: " + ", ".join(item.label for item in loaded)
    record = Recording(session, sessions, cfg, prompt)
    slot = _CacheSlot.of(cache, question, target)
    hit = slot.get()
    if hit is not None:
        record(summary + " (cached)", hit)
        return hit
    result = await _answered(target, question, client, on_usage, record, summary)
    slot.put(result)
    record(summary, result)
    return result


async def _answered(
    target: Target,
    question: _Question,
    client: ProviderClient | None,
    on_usage: UsageSink | None,
    record: Recording,
    summary: str,
) -> AnalyzeResult:
    """The model's answer to ``question``; a call that fails after spending is recorded
    with its cost before the error goes on."""
    spent = _Spent(on_usage)
    try:
        text, parsed, usage = await _ask(target, question, client, spent.count)
    except AnalyzeError as e:
        if spent.usages:  # a failed call may still have cost something: count it
            record(summary, spent.failed(str(e), target.spec.name))
        raise
    return AnalyzeResult.answered(
        text, usage, target.spec.name, parsed=parsed, structured=question.schema is not None
    )


async def _load_all(
    sources: Sequence[FileSource], reach: Reach, allow_loopback_http: bool
) -> list[Loaded]:
    """Each source's bytes, in order (the first that cannot be had stops the call)."""
    load = functools.partial(load_source, reach=reach, allow_loopback_http=allow_loopback_http)
    return [await load(source) for source in sources]


def default_reach(cfg: VisusConfig) -> Reach:
    """The configuration's reach roots, else the working directory."""
    return Reach(list(cfg.reach.roots) or [Path.cwd()], render=cfg.reach.render)


def _vision_target(model: str | None, cfg: VisusConfig) -> Target:
    target = resolve_target(model, cfg)
    if not target.spec.vision:
        raise fail(
            "VISION_NOT_SUPPORTED",
            f"model {target.ref} is not known to take images; name a vision model "
            "(model=..., or auxiliary.vision.model in visus.toml)",
        )
    return target


@dataclasses.dataclass(frozen=True, slots=True)
class _Question:
    """What is asked: the loaded files, the prompt, the schema, how PDFs become pages."""

    loaded: Sequence[Loaded]
    prompt: str
    schema: Mapping[str, Any] | None
    render: bool
    pages: tuple[int, int] | None


@dataclasses.dataclass(frozen=True, slots=True)
class _CacheSlot:
    """Where one question's answer is cached (``cache`` None: nowhere)."""

    cache: AnalyzeCache | None
    key: str
    model: str
    structured: bool

    @classmethod
    def of(cls, cache: AnalyzeCache | None, question: _Question, target: Target) -> _CacheSlot:
        key = ""
        if cache is not None:
            digests = [x.digest for x in question.loaded]
            key = cache_key(digests, question.prompt, target.ref, question.schema, question.pages)
        return cls(cache, key, target.spec.name, question.schema is not None)

    def get(self) -> AnalyzeResult | None:
        """The cached envelope as a result that cost nothing (None: no usable entry)."""
        hit = self.cache.get(self.key) if self.cache is not None else None
        if hit is None or not isinstance(hit.get("text"), str):
            return None
        return AnalyzeResult(
            text=hit["text"],
            model=str(hit.get("model", self.model)),
            cost_usd=0.0,
            input_tokens=0,
            output_tokens=0,
            parsed=hit.get("parsed"),
            structured=self.structured,
            clipped=bool(hit.get("clipped", False)),
            cached=True,
        )

    def put(self, result: AnalyzeResult) -> None:
        if self.cache is None:
            return
        # The cache is best effort: a full disk must not lose an answer already paid for.
        with contextlib.suppress(OSError):
            self.cache.put(self.key, {**result.to_dict(), "clipped": result.clipped})


class _Spent:
    """Every model call's usage, passed on to ``on_usage`` as it comes."""

    def __init__(self, on_usage: UsageSink | None) -> None:
        self.usages: list[Usage] = []
        self._on_usage = on_usage

    def count(self, usage: Usage) -> None:
        self.usages.append(usage)
        if self._on_usage is not None:
            self._on_usage(usage)

    def failed(self, error: str, model: str) -> AnalyzeResult:
        """A failed call's envelope, with what it cost before it failed."""
        total = sum(self.usages, Usage())
        return AnalyzeResult(error, model, total.cost_usd, total.input_tokens, total.output_tokens)


async def _ask(
    target: Target, question: _Question, client: ProviderClient | None, on_usage: UsageSink
) -> tuple[str, Any, Usage]:
    """The files as the model takes them, and its answer (``client``: ours if None)."""
    own_client = client is None
    if client is None:
        client = await connect(target, unavailable="VISION_NOT_SUPPORTED")
    try:
        # Rendering (pdf pages, svg, text) waits on a worker process: off the event loop.
        pics = await asyncio.to_thread(
            _inputs_for,
            question.loaded,
            target.spec,
            client.wire,
            render=question.render,
            pages=question.pages,
        )
        return await ask_model(
            client, target.spec, pics, question.prompt, question.schema, on_usage=on_usage
        )
    finally:
        if own_client:
            await aclose(client)


def _inputs_for(
    loaded: Sequence[Loaded],
    spec: ModelSpec,
    wire: Wire,
    *,
    render: bool,
    pages: tuple[int, int] | None,
) -> list[Picture | Document]:
    """What each file becomes for ``spec`` on ``wire``: a native PDF or pictures."""
    rules = WIRES[wire].rules if wire in WIRES else None
    native = spec.pdf and pages is None and rules is not None and rules.documents
    out: list[Picture | Document] = []
    for i, item in enumerate(loaded, 1):
        if native and rules is not None:
            max_bytes = rules.max_document_bytes
            if max_bytes is not None and rules.base64_byte_limit:
                max_bytes = max_bytes // 4 * 3  # the cap counts base64 characters
            doc = native_document(
                item,
                spec=spec,
                max_pages=max_document_pages(spec, rules),
                max_bytes=max_bytes,
                index=i,
                count=len(loaded),
            )
            if doc is not None:
                out.append(doc)
                continue
        out.extend(
            pictures(item, spec=spec, render=render, pages=pages, index=i, count=len(loaded))
        )
    if pages is not None and not any(isinstance(p, Picture) and p.page is not None for p in out):
        raise fail("INVALID_INPUT", "pages applies to PDFs and no file is a PDF")
    images = sum(isinstance(p, Picture) for p in out)
    rendered = len(loaded) - sum(isinstance(p, Document) for p in out)
    if images > spec.max_images:
        raise fail(
            "PDF_TOO_MANY_PAGES" if images > rendered else "INVALID_INPUT",
            f"{images} images for one request; {spec.name} takes at most {spec.max_images}",
        )
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Recording:
    """Where an analyze call is recorded: ``session`` (None: nowhere) in ``sessions``
    (default: the data folder's), as ``tool`` asked ``prompt``."""

    session: str | None
    sessions: SessionStore | None
    cfg: VisusConfig
    prompt: str
    tool: str = "vision_analyze"

    def __call__(self, summary: str, result: AnalyzeResult) -> None:
        if self.session is None:
            return
        store = self.sessions
        if store is None:
            store = SessionStore(sessions_dir(self.cfg.data_dir))
        record_usage(
            store,
            self.session,
            tool=self.tool,
            prompt=self.prompt,
            summary=summary,
            text=result.text,
            model=result.model,
            usage=result.usage,
        )


def vision_analyze_sync(prompt: str, **kwargs: Any) -> AnalyzeResult:
    """:func:`vision_analyze` for code without an event loop (same arguments)."""
    return asyncio.run(vision_analyze(prompt, **kwargs))
