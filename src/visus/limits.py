"""Every size, count and byte bound in visus, defined once.

Modules import these names; no other module writes a bound as a literal. Per-model
limits (edge, pixels, bytes per provider) are data in the model catalog
(:mod:`visus.models`), not here: these are visus's own hard bounds.

Example:
    >>> from visus import limits
    >>> limits.TETHER_MAX_IMAGES_PER_MESSAGE
    4
"""

from __future__ import annotations

from typing import Final

KB: Final = 1024
MB: Final = 1024 * 1024

# --- media: what we agree to decode or render -----------------------------------
#: Largest source file we read into memory for view/read (bytes).
MAX_SOURCE_BYTES: Final = 64 * MB
#: Pixel count (from the header, before decoding) past which a raster is a bomb.
MAX_SOURCE_PIXELS: Final = 100_000_000
#: Longest side of a raster we decode, whatever its pixel count.
MAX_SOURCE_EDGE: Final = 30_000
#: Largest SVG document we hand to the renderer (bytes).
MAX_SVG_BYTES: Final = 4 * MB
#: Largest raster an SVG may render to (pixels); bigger viewBoxes are scaled down.
MAX_SVG_RENDER_PIXELS: Final = 16_000_000
#: Pages we accept in a PDF before refusing it outright.
MAX_PDF_PAGES: Final = 5_000
#: Largest raster one PDF page may render to (pixels), whatever the profile allows.
MAX_PDF_RENDER_PIXELS: Final = 16_000_000
#: Largest text file we render as a screenshot (bytes).
MAX_TEXT_BYTES: Final = 8 * MB
#: Lines per rendered text page when the caller gives no limit.
TEXT_PAGE_LINES: Final = 120
#: Most lines one rendered text page may hold.
TEXT_MAX_PAGE_LINES: Final = 400
#: Characters per rendered line before wrapping.
TEXT_WRAP_COLUMNS: Final = 120

# --- raster decodes: where they run (media/_cost.py) --------------------------------
#: Scans a JPEG may have. Each scan of a progressive JPEG is a pass over every block,
#: and a scan of "end of band" runs costs a few bytes: 600 scans of 10000 x 10000 in
#: 700 KB held libvips for 22 s (63 s on a loaded machine). Encoders write 1 to ~20.
RASTER_MAX_JPEG_SCANS: Final = 100
#: A raster decodes in the calling process only when its decode is small on every count
#: below (a bounded time and memory, under MEMORY_BUDGET_BYTES); else in the render
#: worker, under its time budget and memory cap. Source pixels decoded (a 40 MP PNG
#: takes ~0.5 s):
RASTER_INPROCESS_MAX_PIXELS: Final = 40_000_000
#: Pixels x scans of a progressive JPEG (a 12 MP photo of 10 scans, 120M, takes ~0.4 s).
RASTER_INPROCESS_MAX_SCAN_PIXELS: Final = 300_000_000
#: Estimated decode buffers (bytes): the pixels, a progressive JPEG's coefficients...
RASTER_INPROCESS_MAX_BYTES: Final = 128 * MB
#: Reads Pillow may make parsing one raster's header (about one per PNG chunk, GIF
#: block or TIFF directory; ~0.5 s of Python at this bound): past it the header is
#: refused, or a frame count stops there. 57 MB of tiny PNG chunks took 28 s unbounded.
RASTER_HEADER_MAX_READS: Final = 100_000
#: Chunks a PNG may have (a 64 MB PNG in libpng's 8 KB IDATs has ~8,000).
RASTER_PNG_MAX_CHUNKS: Final = 100_000
#: Bytes all of a PNG's compressed metadata chunks (zTXt, compressed iTXt, iCCP) may
#: inflate to, counted over every chunk inflated, kept or dropped: past it the rest are
#: dropped unread. 9,000 zTXt chunks each just under Pillow's 1 MB chunk bound (9.5 MB)
#: cost 19 CPU-s when only kept chunks counted. Colour profiles and XMP fit many times.
RASTER_PNG_MAX_METADATA_BYTES: Final = 8 * MB

# --- memory budget: what one process holds for its callers (budget.py) ----------------
#: Bytes of decoded pixels (raster decodes in the process) and request bodies (visus
#: serve, visus proxy) held at once; past it, callers wait.
MEMORY_BUDGET_BYTES: Final = 1024 * MB
#: Longest a caller waits for room in the memory budget before it is refused (busy).
MEMORY_BUDGET_WAIT_SECONDS: Final = 10.0
#: A reservation at least this large (a request body, a decode) hands the heap's free
#: memory back to the system once released (its buffers would otherwise stay resident).
MEMORY_TRIM_BYTES: Final = 32 * MB

# --- rendering budget: every svg, text and pdf render and every raster decode too
# large for the calling process (media/_worker.py) ---------------------------------
#: Wall-clock seconds one render may take in its worker process before it is killed
#: (a busy 500 KB SVG takes ~12 s on a 2-core machine at load 12; idle, ~3 s).
RENDER_TIME_BUDGET_SECONDS: Final = 20.0
#: Address space (RLIMIT_AS) of a render worker: Python, the renderers and the render.
RENDER_MAX_MEMORY_BYTES: Final = 2048 * MB
#: Worker processes of the light lane: every render starts there...
RENDER_LIGHT_WORKERS: Final = 2
#: ... for this long; a render still running then moves to the heavy lane (or, when
#: that lane is full, is stopped and waits for it), so cheap work never queues behind
#: expensive work for longer than this.
RENDER_LIGHT_SLICE_SECONDS: Final = 2.0
#: Worker processes of the heavy lane: long renders, and raster decodes too large for
#: the calling process.
RENDER_HEAVY_WORKERS: Final = 1
#: Callers waiting for one lane's worker at once; more are refused at once (busy).
RENDER_MAX_QUEUED: Final = 8
#: Longest a caller waits for a worker before it is refused (busy).
RENDER_QUEUE_WAIT_SECONDS: Final = 10.0
#: Threads async callers run media work on (media/offload.py), apart from the event
#: loop's default executor: more than the two lanes' workers and queues together, so
#: a full queue never keeps a cheap call from its lane.
MEDIA_THREADS: Final = 24
# Complexity caps checked while an SVG is parsed, before the renderer sees it: each refuses a
# document that would take seconds to minutes to render (measured bombs in tests).
#: Elements in one SVG document.
SVG_MAX_ELEMENTS: Final = 100_000
#: Attributes on one element (usvg looks attributes up linearly: 100k on one took 104 s).
SVG_MAX_ATTRIBUTES: Final = 256
#: Nesting depth of elements.
SVG_MAX_DEPTH: Final = 128
#: Filter primitives (``fe*`` elements) in the document; each is a full-canvas pass.
SVG_MAX_FILTER_PRIMITIVES: Final = 100
#: ``<mask>`` elements in the document; each is an offscreen layer per use.
SVG_MAX_MASKS: Final = 100
#: Text elements (``text``, ``tspan``, ``textPath``); each is shaped separately.
SVG_MAX_TEXT_ELEMENTS: Final = 5_000
#: Path segments over all ``d`` and ``points`` attributes (counted as coordinate pairs).
SVG_MAX_PATH_SEGMENTS: Final = 250_000
#: feMorphology ``radius`` (user units; the cost grows with the radius per pixel).
SVG_MAX_FILTER_RADIUS: Final = 200
#: feTurbulence ``numOctaves`` (each octave is one more noise pass per pixel).
SVG_MAX_TURBULENCE_OCTAVES: Final = 16
#: feConvolveMatrix ``order`` per side (the kernel has order x order taps per pixel).
SVG_MAX_CONVOLVE_ORDER: Final = 16

# --- read tool ------------------------------------------------------------------
#: Lines the read tool returns when the caller gives no limit.
READ_DEFAULT_LINES: Final = 2000
#: Characters after which a single read line is clipped.
READ_MAX_LINE_CHARS: Final = 2000
#: Edge of the throwaway render read uses to tell an image or PDF from other binary.
READ_PROBE_EDGE: Final = 64

# --- JSON bodies -------------------------------------------------------------------
#: Deepest nesting of arrays and objects a JSON body (tether ingress, instance create,
#: web chat API, /mcp) may have; frames nest 4 deep, so this is generous. Deeper
#: input is refused as invalid_input before anything recurses over it.
JSON_MAX_DEPTH: Final = 64

# --- tether protocol --------------------------------------------------------------
TETHER_MAX_IMAGE_BYTES: Final = 10 * MB  # decoded, per image
TETHER_MAX_FRAME_IMAGE_BYTES: Final = 20 * MB  # decoded, all images of one frame
TETHER_MAX_IMAGES_PER_MESSAGE: Final = 4
TETHER_MAX_WIRE_BYTES: Final = 28 * MB  # one frame as sent
TETHER_MEDIA_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
RING_MAX_FRAMES: Final = 1000
RING_MAX_BYTES: Final = 128 * MB
#: The rings of all of a server's instances together (the oldest frames anywhere go
#: first): a client may create any number of instances, and eight of them, each ring
#: full of 26 MB messages, held 1 GB of the server.
RINGS_MAX_BYTES: Final = 256 * MB
#: Longest a connection to visus serve may wait for a request's headers (seconds) before
#: it is closed: half-sent requests would otherwise hold sockets (and descriptors) for
#: ever. A request being answered is not cut by it.
HTTP_HEADERS_TIMEOUT_SECONDS: Final = 30.0
#: A request body must arrive within this many seconds, plus one second per
#: HTTP_BODY_MIN_BYTES_PER_SECOND of its length: a body that trickles (a byte every few
#: seconds, to hold a request open) is cut with 408. A 28 MB frame may take 7 minutes.
HTTP_BODY_SECONDS: Final = 30.0
HTTP_BODY_MIN_BYTES_PER_SECOND: Final = 64 * KB
#: Largest body a request may carry to a route served without the token (the web chat's
#: sign-in, its page and files, the health probes): past it, 413 before a byte is read.
PUBLIC_MAX_BODY_BYTES: Final = 16 * KB
#: An answer is sent in pieces of at most this many bytes, each only once the client
#: has taken the one before (so a client that does not read holds one piece, not the
#: answer, in the server's send buffer) ...
HTTP_SEND_PIECE_BYTES: Final = 64 * KB
#: ... and a client that takes none for this long is dropped (its stream, its answer).
HTTP_SEND_STALL_SECONDS: Final = 30.0
#: Connections (and the requests on them) a server takes at once; more are answered
#: 503 at once, not queued.
HTTP_MAX_CONNECTIONS: Final = 1000
#: Longest a server stopping (SIGTERM, Ctrl-C) waits for requests in flight before it
#: closes their connections and exits.
HTTP_SHUTDOWN_GRACE_SECONDS: Final = 10.0
#: Open SSE streams per instance, and per server: more are refused (429). Every client
#: of a server holds its one token, so per token is per server.
SSE_MAX_STREAMS_PER_INSTANCE: Final = 32
SSE_MAX_STREAMS: Final = 256
#: Failed token checks one client address may make in AUTH_FAILURE_WINDOW_SECONDS:
#: past them its requests are refused (429) until the window has passed, a right token
#: too (else each answer would still tell a right guess from a wrong one). At most
#: AUTH_MAX_CLIENTS addresses are remembered (the oldest forgotten first).
AUTH_MAX_FAILURES: Final = 20
AUTH_FAILURE_WINDOW_SECONDS: Final = 60.0
AUTH_MAX_CLIENTS: Final = 4096
#: Longest a tether long poll (or MCP tether_read) may hold the request open (seconds).
TETHER_POLL_MAX_WAIT_SECONDS: Final = 60.0
#: Payload bytes one poll answer carries when the caller gives no max_bytes (one frame
#: always comes, whatever its size: at most TETHER_MAX_WIRE_BYTES).
TETHER_POLL_DEFAULT_MAX_BYTES: Final = 8 * MB
#: Longest session id or msg_id a tether frame may carry (characters).
TETHER_MAX_ID_CHARS: Final = 128
#: Turns accepted but not finished per instance; each holds its decoded images until
#: it runs, so more are refused (429) rather than queued without bound.
TETHER_MAX_PENDING_TURNS: Final = 8
#: Instances one server holds (a create request past it is refused; the web chat's
#: and replicas' fixed ids are not counted out): each has its ring, its queued turns
#: and their runs, so a client creating them without end multiplied every bound above.
TETHER_MAX_INSTANCES: Final = 64
#: The messages (as sent, and their decoded images) of every turn in flight on one
#: server, all instances together, each counted twice: a turn holds its message until
#: it ends, and running it holds about as much again (its images fitted and sent).
#: Past it a user message is refused 429 busy: about five turns of two 9.5 MB images
#: at once, hundreds of screenshots' size. Apart from MEMORY_BUDGET_BYTES, which the
#: turns' own decodes need.
TETHER_TURNS_MAX_BYTES: Final = 512 * MB
#: What a turn counts at least there (twice, as above): running it holds its context,
#: the files it views and the model's answer, whatever its message. So at most 64
#: turns run at once on a server (TETHER_MAX_INSTANCES x TETHER_MAX_PENDING_TURNS
#: would be 512), each of which may start the operator's MCP servers.
TETHER_TURN_MIN_BYTES: Final = 4 * MB
#: Ingress bodies up to this size skip the early busy check: a turn.cancel must pass
#: when an instance is at TETHER_MAX_PENDING_TURNS (that is when a user wants Stop).
TETHER_SMALL_FRAME_BYTES: Final = 4096
#: Streamed answer text is sent as one ``assistant.delta`` per this many seconds (from
#: its first unsent piece) or per TETHER_DELTA_MAX_BYTES of it, whichever comes first:
#: fewer frames (on PostgreSQL, fewer transactions, and fewer reads by the replicas
#: serving the streams) at ten updates a second, a pace text still reads as it comes.
#: 25 ms here cost three PostgreSQL replicas 24.9 ms of CPU per turn, 100 ms 16.5
#: (``python -m benchmarks store``'s model-bound turns, 12 words 20 ms apart).
TETHER_DELTA_WINDOW_SECONDS: Final = 0.1
TETHER_DELTA_MAX_BYTES: Final = 16 * 1024
#: The newest frames a PostgreSQL replica keeps per instance (``store/ring_tail.py``),
#: so its own streams read what it just appended without a round trip: frames, bytes
#: and the largest frame kept (a user message with images is read from the database),
#: for at most this many instances.
PG_TAIL_FRAMES: Final = 64
PG_TAIL_BYTES: Final = 256 * 1024
PG_TAIL_FRAME_BYTES: Final = 32 * 1024
PG_TAIL_INSTANCES: Final = 1024
#: Blob bytes a PostgreSQL store keeps in memory per process (the blobs it wrote or read
#: and verified, newest first): a turn lowers its live images again on every step.
PG_BLOB_CACHE_BYTES: Final = 64 * MB

# --- network ----------------------------------------------------------------------
NET_MAX_REDIRECTS: Final = 5
NET_MAX_BYTES: Final = 32 * MB
NET_TIMEOUT_SECONDS: Final = 30.0
NET_MAX_VIDEO_BYTES: Final = 100 * MB

# --- vision_analyze ---------------------------------------------------------------
ANALYZE_MAX_INPUT_BYTES: Final = 32 * MB
ANALYZE_MAX_FILES: Final = 4
ANALYZE_MAX_RESULT_CHARS: Final = 8000
ANALYZE_MAX_PDF_PAGES: Final = 20
#: Keyframes video_analyze sends when the model does not take video natively.
ANALYZE_VIDEO_MAX_FRAMES: Final = 16
#: Longest edge of one keyframe as sampled (it is fitted to the model after).
ANALYZE_VIDEO_FRAME_EDGE: Final = 1280
#: Largest video sent inline to a model that takes video natively (Gemini's inline cap).
ANALYZE_VIDEO_INLINE_BYTES: Final = 20 * MB
#: Wall-clock budget of sampling one video's keyframes (decoded in the calling
#: process, checked after each frame; a frame itself is bounded by MAX_SOURCE_PIXELS):
#: 30 frames of 12000 x 12000 in a 5 MB file took 43 s unbounded.
VIDEO_DECODE_SECONDS: Final = 20.0
#: Result cache entries kept in memory by the in-memory analyze cache.
ANALYZE_CACHE_MAX_ENTRIES: Final = 256

# --- attachments ------------------------------------------------------------------
ATTACHMENT_MAX_FILE_BYTES: Final = 25 * MB
ATTACHMENT_MAX_SESSION_BYTES: Final = 200 * MB
ATTACHMENT_MAX_FILES: Final = 200
#: All sessions of one instance together (one server's web chat, say): a client may
#: open any number of sessions, so the per-session caps alone bounded nothing (fifty
#: sessions of 200 MB were all taken).
ATTACHMENT_MAX_INSTANCE_BYTES: Final = 1024 * MB
ATTACHMENT_MAX_INSTANCE_FILES: Final = 2000
GREP_MAX_HITS: Final = 200
GREP_MAX_PATTERN_CHARS: Final = 500
#: Characters of one line that grep searches (the rest of a longer line is skipped).
GREP_MAX_LINE_CHARS: Final = 10_000
#: Wall-clock budget of one grep call (seconds); catastrophic patterns stop here.
GREP_TIME_BUDGET_SECONDS: Final = 2.0
#: Wall-clock budget of the regular expressions of one JSON Schema check (a client's
#: ``format`` against a model's answer): ``re`` would backtrack without bound.
SCHEMA_MATCH_SECONDS: Final = 0.5
#: Longest stored attachment name (UTF-8 bytes), leaving room for a " (N)" suffix.
ATTACHMENT_MAX_NAME_BYTES: Final = 200

# --- web chat ---------------------------------------------------------------------
#: Largest attachment upload body the web chat reads: one file at the per-file cap as
#: base64, plus room for the JSON around it and the file's name.
WEB_ATTACHMENT_MAX_BODY_BYTES: Final = (ATTACHMENT_MAX_FILE_BYTES + 2) // 3 * 4 + 64 * KB
#: Characters of a session's first message shown as its title in the session list.
WEB_SESSION_TITLE_CHARS: Final = 80
#: Longest title a person may give a session (web chat Rename, SessionLog.set_title).
SESSION_TITLE_MAX_CHARS: Final = 200
#: Largest image the web chat takes to fit on the server (what ``visus view`` reads):
#: images over the tether's per-image bound are fitted there before they are sent.
WEB_FIT_MAX_BYTES: Final = MAX_SOURCE_BYTES

# --- MCP and Telegram -------------------------------------------------------------
#: Largest MCP tool result (text + images as sent): Claude Desktop and Claude Code
#: reject bigger ones. VISUS_MCP_MAX_RESULT_BYTES (or visus mcp --max-result-bytes)
#: sets another, down to MCP_MIN_RESULT_BYTES.
MCP_MAX_RESULT_BYTES: Final = 1 * MB
MCP_MIN_RESULT_BYTES: Final = 64 * KB
#: Largest request body ``/mcp`` reads: the biggest argument a tool takes as base64
#: (a tether frame, or a vision_analyze file) plus room for the JSON-RPC around it, so
#: over HTTP every call that works over stdio works too (the MCP SDK's own default is
#: 4 MiB) and bigger ones get visus's own limit error.
MCP_MAX_REQUEST_BYTES: Final = (
    max(TETHER_MAX_WIRE_BYTES, (ANALYZE_MAX_INPUT_BYTES + 2) // 3 * 4) + 1 * MB
)
#: Images an MCP client session's view("sha256:...") can bring back (its latest views).
MCP_VIEW_RECALL_IMAGES: Final = 32
#: Longest path an MCP client may name (Linux's PATH_MAX): a longer one is refused
#: without being quoted back (a refusal echoing a megabyte path would break the host).
MCP_MAX_PATH_CHARS: Final = 4096
#: A mounted MCP server: seconds to start (spawn, initialize, list tools), seconds per
#: tool call (a hang becomes a tool error), and what one result may carry.
MCP_CLIENT_START_SECONDS: Final = 30.0
MCP_CLIENT_CALL_SECONDS: Final = 60.0
MCP_CLIENT_MAX_TEXT_CHARS: Final = 200_000
MCP_CLIENT_MAX_IMAGES: Final = 8
MCP_CLIENT_MAX_IMAGE_BYTES: Final = 20 * MB
MCP_CLIENT_MAX_TOOLS: Final = 128
TELEGRAM_MAX_PHOTO_BYTES: Final = 10 * MB
TELEGRAM_MAX_DOWNLOAD_BYTES: Final = 20 * MB
TELEGRAM_MAX_PHOTO_SIDES_SUM: Final = 10_000
TELEGRAM_MAX_PHOTO_RATIO: Final = 20
TELEGRAM_MAX_CAPTION_CHARS: Final = 1024
TELEGRAM_MAX_TEXT_CHARS: Final = 4096
#: Photos (or documents) one sendMediaGroup call carries.
TELEGRAM_MAX_MEDIA_GROUP: Final = 10
#: Least time between two edits of a streamed message (Telegram allows ~1 per second).
TELEGRAM_EDIT_INTERVAL_SECONDS: Final = 1.0
#: Quiet time after an album's last photo before the album counts as complete.
TELEGRAM_ALBUM_WINDOW_SECONDS: Final = 1.0
#: Retries of one Bot API call after a 429 or a network error.
TELEGRAM_MAX_RETRIES: Final = 5
#: Longest wait between retries, whatever retry_after asks for (seconds).
TELEGRAM_MAX_RETRY_AFTER_SECONDS: Final = 60.0
#: How often "typing…" is renewed while the agent works (Telegram shows it ~5 s).
TELEGRAM_TYPING_INTERVAL_SECONDS: Final = 4.0
#: Longest the gateway keeps showing "typing…" for one wait on the agent.
TELEGRAM_TYPING_MAX_SECONDS: Final = 300.0
#: Longest a stopping gateway waits to deliver the replies it already holds.
TELEGRAM_SHUTDOWN_DRAIN_SECONDS: Final = 10.0

# --- agent ---------------------------------------------------------------------------
#: Model calls one ``run_turn`` may make by default (``--max-steps``, ``[agent] max_steps``):
#: a screen agent takes a step per screenshot and needs hundreds; a loop that never
#: answers stops here and says so.
AGENT_MAX_STEPS: Final = 200
#: Longest side of an image the agent sends out (send_image); bytes per tether's bound.
OUTBOUND_MAX_EDGE: Final = 4096

# --- providers --------------------------------------------------------------------
#: Seconds one provider request may take (connect + read) before it counts as failed.
PROVIDER_TIMEOUT_SECONDS: Final = 300.0
#: Retries after the first attempt on 429, 5xx and connection errors.
PROVIDER_MAX_RETRIES: Final = 3
#: Longest single wait between retries, whatever Retry-After asks for (seconds).
PROVIDER_MAX_BACKOFF_SECONDS: Final = 60.0

# --- record -----------------------------------------------------------------------
#: Longest session id (characters); ids are also file names.
SESSION_ID_MAX_CHARS: Final = 128
#: Elided old messages retention remembers between views (memo only; never changes a result).
RETENTION_MEMO_MESSAGES: Final = 4096
#: Turns a pasted/attached image keeps its pixels by default (then view("sha256:...")).
RETENTION_ATTACHMENTS_LIVE_TURNS: Final = 3
#: The fewest hex digits a view("sha256:...") prefix may have.
DIGEST_MIN_PREFIX: Final = 12
#: Hex digits of the digest a descriptor names (view takes any unambiguous prefix).
DESCRIPTOR_DIGEST_CHARS: Final = 16
#: Tool images live at most in one request by default, and how many leave at a time when
#: that is passed. benchmarks/RESULTS.md "economics" (a 100-step screen agent, a third of
#: the screens unchanged): 4/4 costs less than keeping only the last screenshot on both
#: the Anthropic and the OpenAI Responses wire (10/5 cost 39% more on Anthropic: a rewrite
#: of the cached window every 5 screens; 6/6 was 2% cheaper there but above keep-last on
#: OpenAI).
RETENTION_LIVE_IMAGES: Final = 4
#: Append-only histories (models that bind their reasoning to the prefix): the live tool
#: image tokens past which the oldest leave, and the share of what fits that leaves then,
#: for a family ``retention.APPEND_ONLY_FAMILIES`` does not list. No catalog model takes
#: it: every one that binds (Claude 5.5, Fable 5.x, Mythos 5.2, GPT-5.6, GPT-6.x) has its
#: family's measured choice there (benchmarks/RESULTS.md "economics"); it stays for an id
#: no family part matches (a future family, taken by its nearest listed model), never
#: chosen by measurement: 1.7-2.7x dearer than each family's choice in every run.
RETENTION_APPEND_ONLY_TOKENS: Final = 60_000
RETENTION_APPEND_ONLY_SHARE: Final = 0.5
#: Live tool images take at most this share of a model's context window.
RETENTION_CONTEXT_SHARE: Final = 0.5
#: At a provider's limit (images per request, request bytes), the oldest images leave in
#: one batch of this share of what fits, not one per step (each step would rewrite the
#: cached prefix): ``retention.evicted_to_fit``.
RETENTION_LIMIT_SHARE: Final = 0.25
#: Only what changed (media/changes.py): the largest image two views are compared at ...
CHANGES_MAX_PIXELS: Final = 16_000_000
#: ... the rectangles at most that hold the changed pixels (each sent as a crop) ...
CHANGES_MAX_REGIONS: Final = 3
#: ... the context kept around them (pixels of the image as sent; wider than high, so a
#: changed letter comes with the rest of its word) ...
CHANGES_MARGIN_X_PX: Final = 32
CHANGES_MARGIN_Y_PX: Final = 8
#: ... and the share of the image they may cover before the whole image is sent instead:
#: past a fifth it is another screen (a page loaded, a file opened, every word of a grid
#: replaced), which the model should see whole rather than piece together.
CHANGES_MAX_SHARE: Final = 0.2

# --- wire -------------------------------------------------------------------------
#: Anthropic: a request carrying more than this many images ...
ANTHROPIC_MANY_IMAGES: Final = 20
#: ... must keep every image at most this many pixels per side.
ANTHROPIC_MANY_IMAGES_MAX_EDGE: Final = 2000
#: Anthropic: a request body is at most 32 MB (413 request_too_large past it) ...
ANTHROPIC_MAX_REQUEST_BYTES: Final = 32 * MB
#: ... and its images (base64) may take this much of it.
ANTHROPIC_MAX_REQUEST_IMAGE_B64: Final = 30 * MB
#: OpenAI: decoded image bytes in one request (images-vision guide: 50 MB).
OPENAI_MAX_REQUEST_IMAGE_BYTES: Final = 50 * MB
#: Native PDF documents (WIRES.md). Anthropic: a request is at most 32 MB, so one
#: document's base64 may take what images may; 100 pages on 200k-context models ...
ANTHROPIC_MAX_PDF_B64: Final = 30 * MB
ANTHROPIC_MAX_PDF_PAGES: Final = 100
#: ... and 600 pages on models whose context window is larger than this (tokens).
ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS: Final = 200_000
ANTHROPIC_MAX_PDF_PAGES_LARGE_CONTEXT: Final = 600
#: OpenAI file inputs: 32 MB of PDF content and 100 pages per request.
OPENAI_MAX_PDF_BYTES: Final = 32 * MB
OPENAI_MAX_PDF_PAGES: Final = 100
#: Gemini: 1000 pages per document (bytes count against the inline request budget).
GEMINI_MAX_PDF_PAGES: Final = 1000
#: Bedrock Converse: 4.5 MB per document, 5 documents per request, name length we send.
BEDROCK_MAX_DOCUMENT_BYTES: Final = 4_718_592
BEDROCK_MAX_DOCUMENTS: Final = 5
BEDROCK_MAX_DOCUMENT_NAME_CHARS: Final = 200

#: Per-image and per-request bounds of the real services, named by provider: visus
#: fits images under them, and the reference server enforces them as the real
#: services do (it imports these names; it stays an independent oracle).
#: Anthropic: base64 characters per image, longest side, images per request.
ANTHROPIC_MAX_IMAGE_B64: Final = 5 * MB
ANTHROPIC_MAX_EDGE: Final = 8000
ANTHROPIC_MAX_IMAGES: Final = 100
#: ... and on models whose context is over ``ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS`` (vision guide).
ANTHROPIC_MAX_IMAGES_LARGE_CONTEXT: Final = 600
#: OpenAI (Chat Completions and Responses): decoded bytes per image, images per request.
OPENAI_MAX_IMAGE_BYTES: Final = 20 * MB
OPENAI_MAX_IMAGES: Final = 500
#: Gemini: inline data per request (bytes, decoded), images per request.
GEMINI_MAX_INLINE_BYTES: Final = 20 * MB
GEMINI_MAX_IMAGES: Final = 3600
#: Bedrock Converse: decoded bytes per image (3.75 MB), longest side, images per request.
BEDROCK_MAX_IMAGE_BYTES: Final = 3_932_160
BEDROCK_MAX_EDGE: Final = 8000
BEDROCK_MAX_IMAGES: Final = 20

# --- proxy ------------------------------------------------------------------------
#: Largest request body ``visus proxy`` reads (bytes): room for many oversized images
#: before they are fitted (Anthropic's own cap, 32 MB, applies after).
PROXY_MAX_BODY_BYTES: Final = 256 * MB
#: The profile for a model the catalog does not know: the tightest of the major
#: providers (Anthropic's 1568 px native edge and ~1.15 MP, 3.75 MB raw = 5 MB base64,
#: at most 20 images a request like Bedrock), so an image fitted to it passes anywhere.
PROXY_UNKNOWN_MAX_EDGE: Final = 1568
PROXY_UNKNOWN_MAX_PIXELS: Final = 1_150_000
PROXY_UNKNOWN_MAX_IMAGE_BYTES: Final = 3_750_000
PROXY_UNKNOWN_MAX_IMAGES: Final = 20
#: Seconds to connect to the upstream. Reading has no proxy-side timeout: the proxy
#: waits for an answer as long as its client does (the SDKs wait 600 s).
PROXY_CONNECT_TIMEOUT_SECONDS: Final = 30.0
#: Base64 bytes of fitted images the proxy keeps between requests (clients re-send
#: their history every step: a cached image is neither decoded nor fitted again).
PROXY_FIT_CACHE_BYTES: Final = 64 * MB
#: Characters of a tool call's arguments shown in an image's label or descriptor.
PROXY_LABEL_ARGS_CHARS: Final = 120
#: A reply the proxy reads while passing it on (its usage; on Messages, the reasoning
#: the upstream dropped): a JSON reply past this, or a stream event past it, is passed
#: on unread (proxy.replies.ReplyTap).
PROXY_REPLY_TAP_BYTES: Final = 1 * MB
#: Distinct model names the savings ledger and /metrics keep apart (a client names the
#: model: past this, or past PROXY_LEDGER_MODEL_CHARS, a name is counted as "other").
PROXY_LEDGER_MAX_MODELS: Final = 64
PROXY_LEDGER_MODEL_CHARS: Final = 100
#: Seconds between the proxy's writes of its savings ledger (and one at shutdown).
PROXY_LEDGER_FLUSH_SECONDS: Final = 10.0

# --- operations: health and shutdown ---------------------------------------------
#: Seconds a replica asked to stop stays up answering /readyz 503 (while it still takes
#: turns), so a load balancer probing every second or two sends it nothing new first.
DRAIN_SECONDS: Final = 5.0

# --- reference server: its own knobs -----------------------------------------------
#: Default context window of the reference model (tokens); `--context-tokens` overrides.
REFERENCE_CONTEXT_TOKENS: Final = 128_000
#: Largest request body the reference server reads (bytes).
REFERENCE_MAX_BODY_BYTES: Final = 100 * MB
#: Longest side of a PDF page as the reference model renders it to perceive a document.
REFERENCE_PDF_PAGE_EDGE: Final = 1568
#: Seconds the local reference server a command started (``visus run``) waits for the
#: next command before it exits (its OCR engine stays warm meanwhile).
REFERENCE_LOCAL_IDLE_SECONDS: Final = 600.0
#: Seconds a command waits for the local reference server it started to be ready (its
#: OCR engine loaded: seconds idle, more on a loaded machine).
REFERENCE_LOCAL_START_SECONDS: Final = 120.0
#: Longest side at which the reference model looks for text in a large image (its OCR
#: reads the words at the larger working size; finding the lines needs no more).
REFERENCE_OCR_DETECT_SIDE: Final = 1280
