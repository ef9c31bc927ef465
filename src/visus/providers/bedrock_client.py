"""Amazon Bedrock Converse transport. The only module that imports ``boto3``/``botocore``.

``visus.wire`` lowers to the Converse REST body, where image (and document) bytes
are base64 text; boto3 takes raw bytes and encodes them itself, so they are decoded
back here. boto3 is synchronous: each call runs in a worker thread, and a stream is
read one event per thread hop so ``on_delta`` always runs on the event loop. Replies
and events are already dicts; :mod:`visus.wire.bedrock` parses them.

Example:
    >>> BedrockClient(ProviderConfig(region="us-east-1", api_key="a",
    ...                              aws_secret_access_key="b")).wire
    'bedrock'
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

from visus.errors import AuthError, InvalidInputError, ProviderError
from visus.providers.base import (
    Body,
    Client,
    MappedError,
    NoStreaming,
    ProviderConfig,
    classify_http,
    parse_retry_after,
)
from visus.record.messages import JSONObject

try:
    import boto3
    import botocore.config
    import botocore.exceptions
    from botocore.awsrequest import AWSRequest
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Bedrock client needs: pip install -e '.[providers]' in the visus checkout"
    ) from e

__all__ = ["BedrockClient", "BedrockTransport", "map_bedrock_error", "to_boto_request"]

# Error codes as Converse names them (HTTP responses and in-stream exception events).
_CODE_STATUS = {
    "throttlingexception": 429,
    "toomanyrequestsexception": 429,
    "servicequotaexceededexception": 429,
    "validationexception": 400,
    "accessdeniedexception": 403,
    "unrecognizedclientexception": 403,
    "expiredtokenexception": 403,
    "invalidsignatureexception": 403,
    "resourcenotfoundexception": 404,
    "modeltimeoutexception": 408,
    "modelnotreadyexception": 503,
    "serviceunavailableexception": 503,
    "internalserverexception": 500,
    "modelstreamerrorexception": 500,
}


def map_bedrock_error(e: Exception, *, provider: str = "bedrock") -> MappedError | None:
    """The one place boto3/botocore errors become visus errors."""
    if isinstance(e, botocore.exceptions.ClientError):
        error = e.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", "") or e)
        meta = e.response.get("ResponseMetadata", {})
        status = meta.get("HTTPStatusCode") or _CODE_STATUS.get(code.lower())
        headers = meta.get("HTTPHeaders")
        return classify_http(
            int(status) if status else 400,
            f"{code}: {message}" if code else message,
            provider=provider,
            code=code,
            retry_after=parse_retry_after(headers if isinstance(headers, Mapping) else None),
        )
    if isinstance(
        e, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError
    ):
        return MappedError(
            AuthError(
                f"{provider}: no AWS credentials (set AWS_ACCESS_KEY_ID and "
                f"AWS_SECRET_ACCESS_KEY, or AWS_PROFILE): {e}",
                provider=provider,
            )
        )
    if isinstance(
        e,
        botocore.exceptions.EndpointConnectionError
        | botocore.exceptions.ConnectionClosedError
        | botocore.exceptions.ConnectTimeoutError
        | botocore.exceptions.ReadTimeoutError,
    ):
        return classify_http(None, f"{type(e).__name__}: {e}", provider=provider)
    if isinstance(e, botocore.exceptions.BotoCoreError):
        return MappedError(ProviderError(f"{provider}: {e}", provider=provider))
    return None


def _no_streaming(e: botocore.exceptions.ClientError) -> bool:
    """Whether ConverseStream failed because streaming itself is unavailable here."""
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    message = str(e.response.get("Error", {}).get("Message", "")).lower()
    return status in (404, 405) or ("stream" in message and "support" in message)


def _decode_bytes(node: object) -> object:
    if isinstance(node, list):
        return [_decode_bytes(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: JSONObject = {}
    for key, value in node.items():
        if key == "source" and isinstance(value, dict) and isinstance(value.get("bytes"), str):
            out[key] = {**value, "bytes": _b64(value["bytes"])}
        elif key == "redactedContent" and isinstance(value, str):  # Claude's redacted thinking
            out[key] = _b64(value)
        else:
            out[key] = _decode_bytes(value)
    return out


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidInputError("bedrock: a block's bytes are not base64") from err


def _encode_bytes(node: object) -> object:
    """boto3's raw bytes in a reply (redacted reasoning) as base64 text, so the reply is
    JSON like the REST API's and the record can keep it."""
    if isinstance(node, bytes | bytearray):
        return base64.b64encode(bytes(node)).decode("ascii")
    if isinstance(node, list):
        return [_encode_bytes(v) for v in node]
    if isinstance(node, dict):
        return {k: _encode_bytes(v) for k, v in node.items()}
    return node


def to_boto_request(payload: Body, *, model_id: str) -> JSONObject:
    """The lowered Converse REST body as ``client.converse(**kwargs)`` takes it.

    Example:
        >>> req = to_boto_request({"messages": [{"role": "user", "content": [
        ...     {"image": {"format": "png", "source": {"bytes": "aGk="}}}]}]}, model_id="m")
        >>> req["modelId"], req["messages"][0]["content"][0]["image"]["source"]["bytes"]
        ('m', b'hi')
    """
    body = {k: _decode_bytes(v) for k, v in payload.items() if k not in ("modelId", "stream")}
    return {"modelId": model_id, **body}


class BedrockTransport:
    """boto3's ``bedrock-runtime``: a Converse body in, the reply or its stream events
    as dicts out (boto3 returns dicts already).

    ``config.api_key`` is the access key id (with ``aws_secret_access_key`` and an
    optional ``aws_session_token``); without them boto3's usual chain applies
    (environment, profile, instance role). ``base_url`` is the endpoint URL.
    """

    def __init__(self, config: ProviderConfig) -> None:
        session = boto3.session.Session(
            aws_access_key_id=config.api_key,
            aws_secret_access_key=config.aws_secret_access_key,
            aws_session_token=config.aws_session_token,
            region_name=config.region,
        )
        # Any on purpose: boto3 makes its clients at run time, and the stubs type
        # converse(**kwargs) as their own ConverseRequestTypeDef, which the body (a JSON
        # object from wire.bedrock, its bytes decoded here) is not statically; a typed
        # client would need a cast at each call.
        self._client: Any = session.client(
            "bedrock-runtime",
            endpoint_url=config.base_url,
            config=botocore.config.Config(
                # One attempt: the Client owns retrying, the same way for every provider.
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=min(config.timeout, 60.0),
                read_timeout=config.timeout,
            ),
        )
        self._streams = True
        if config.headers:
            headers = dict(config.headers)

            def add_headers(request: AWSRequest, **_: object) -> None:
                for k, v in headers.items():
                    request.headers[k] = v

            self._client.meta.events.register("before-sign.bedrock-runtime.*", add_headers)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._client.close)

    async def call(self, body: Body, model: str) -> JSONObject:
        reply = await asyncio.to_thread(
            self._client.converse, **to_boto_request(body, model_id=model)
        )
        return {k: _encode_bytes(v) for k, v in reply.items() if k != "ResponseMetadata"}

    async def events(self, body: Body, model: str) -> AsyncIterator[JSONObject]:
        if not self._streams:
            raise NoStreaming
        kwargs = to_boto_request(body, model_id=model)
        try:
            reply = await asyncio.to_thread(self._client.converse_stream, **kwargs)
        except botocore.exceptions.ClientError as e:
            if not _no_streaming(e):
                raise
            # Some models (tools + streaming) and gateways cannot stream: answer in one
            # piece rather than not at all, and stop trying to stream.
            self._streams = False
            raise NoStreaming from e
        events = iter(reply["stream"])
        # boto3 reads the stream synchronously: one event per thread hop, so the
        # caller's on_delta always runs on the event loop.
        while (event := await asyncio.to_thread(next, events, None)) is not None:
            yield cast("JSONObject", _encode_bytes(event))

    def map_error(self, e: Exception, provider: str) -> MappedError | None:
        return map_bedrock_error(e, provider=provider)


class BedrockClient(Client):
    """The :class:`~visus.providers.base.Client` over :class:`BedrockTransport`."""

    def __init__(self, config: ProviderConfig, *, provider: str = "bedrock") -> None:
        super().__init__(BedrockTransport(config), provider=provider, wire="bedrock", config=config)
