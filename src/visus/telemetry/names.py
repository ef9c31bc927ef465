"""Attribute and span names, spelled as the OpenTelemetry GenAI conventions spell them.

The ``gen_ai.*`` names are the conventions' own (semantic-conventions-genai,
``docs/gen-ai/gen-ai-spans.md``, ``gen-ai-agent-spans.md``, ``execute-tool.md``;
``tests/telemetry/test_traces.py`` checks each against the constants of the installed
``opentelemetry-semantic-conventions``). The conventions have no names for what visus
adds (a step's price, a view's region, retention), so those are ``visus.*``.

Example:
    >>> provider_name("gemini"), provider_name("anthropic"), provider_name("reference")
    ('gcp.gemini', 'anthropic', 'reference')
"""

from __future__ import annotations

from typing import Final

OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
RESPONSE_MODEL: Final = "gen_ai.response.model"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
CONVERSATION: Final = "gen_ai.conversation.id"
AGENT_NAME: Final = "gen_ai.agent.name"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_RESULT: Final = "gen_ai.tool.call.result"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
ERROR_TYPE: Final = "error.type"

#: ``gen_ai.operation.name`` values (the conventions' well-known ones).
CHAT: Final = "chat"
INVOKE_AGENT: Final = "invoke_agent"
EXECUTE_TOOL: Final = "execute_tool"

# visus's own: what the conventions do not name.
COST_USD: Final = "visus.usage.cost_usd"
REQUEST_ID: Final = "visus.request_id"
TURN: Final = "visus.turn"
STEPS: Final = "visus.steps"
STOPPED: Final = "visus.stopped"
SURFACE: Final = "visus.surface"
VIEW_SOURCE: Final = "visus.view.source"
VIEW_DIGEST: Final = "visus.view.digest"
VIEW_MEDIA_TYPE: Final = "visus.view.media_type"
VIEW_BYTES: Final = "visus.view.bytes"
VIEW_WIDTH: Final = "visus.view.width"
VIEW_HEIGHT: Final = "visus.view.height"
VIEW_TOKENS: Final = "visus.view.tokens"
VIEW_PAGE: Final = "visus.view.page"
VIEW_REGION: Final = "visus.view.region"
#: A view of an image by its digest (``view("sha256:...")``): an evicted image seen again.
VIEW_REVIEWED: Final = "visus.view.reviewed"
#: The span event a model call carries: which images the request keeps, which left it
#: (descriptors), which went as a note naming an equal live image.
RETENTION_EVENT: Final = "visus.retention"
KEPT: Final = "visus.retention.kept"
EVICTED: Final = "visus.retention.evicted"
DEDUPLICATED: Final = "visus.retention.deduplicated"
# The proxy's edits of one request.
IMAGES: Final = "visus.proxy.images"
FITTED: Final = "visus.proxy.images_fitted"
HOISTED: Final = "visus.proxy.images_hoisted"
REPAIRED: Final = "visus.proxy.images_repaired"
ELIDED: Final = "visus.proxy.images_elided"
#: Sent as a note naming the earlier image it repeats, with crops of what changed.
DEDUPLICATED_IMAGES: Final = "visus.proxy.images_deduplicated"
BYTES_SAVED: Final = "visus.proxy.bytes_saved"
TOKENS_SAVED: Final = "visus.proxy.tokens_saved"
HTTP_STATUS: Final = "http.response.status_code"

#: visus's provider names -> the conventions' ``gen_ai.provider.name`` values.
_PROVIDERS: Final = {
    "anthropic": "anthropic",
    "openai": "openai",
    "gemini": "gcp.gemini",
    "bedrock": "aws.bedrock",
}


def provider_name(provider: str) -> str:
    """The conventions' name for a visus provider (others keep visus's name)."""
    return _PROVIDERS.get(provider, provider)
