"""The router's error tree, each mapped once (in the processor) to an OpenAI-style reply.

RouterError                       -> {"error": {"message", "type", "param", "code"}}
├── BadRequest            400       invalid_request_error
├── Blocked               403       (status configurable by the block plugin)
├── NotFound              404       model_not_found / unknown path
├── MethodNotAllowed      405
├── PayloadTooLarge       413
├── UnsupportedMediaType  415
├── TooManyRequests       429       classifiers overloaded with on_overload: reject
└── ServiceUnavailable    503       a signal failed with on_error: reject
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping


class RouterError(Exception):
    status = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers = dict(headers or {})

    def body(self) -> bytes:
        return error_body(self.message, self.error_type, self.param, self.code)


class BadRequest(RouterError):
    status = 400
    error_type = "invalid_request_error"


class Blocked(RouterError):
    status = 403
    error_type = "invalid_request_error"
    code = "blocked"


class NotFound(RouterError):
    status = 404
    error_type = "invalid_request_error"


class ModelNotFound(NotFound):
    code = "model_not_found"


class MethodNotAllowed(RouterError):
    status = 405
    error_type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(RouterError):
    status = 413
    error_type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedMediaType(RouterError):
    status = 415
    error_type = "invalid_request_error"
    code = "unsupported_media_type"


# Both are retryable: OpenAI's SDKs retry 429 and 503 on their own, after `retry-after`.
RETRY_AFTER_S = "1"


class TooManyRequests(RouterError):
    status = 429
    error_type = "rate_limit_error"
    code = "router_overloaded"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"retry-after": RETRY_AFTER_S})


class ServiceUnavailable(RouterError):
    status = 503
    error_type = "server_error"
    code = "classifier_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"retry-after": RETRY_AFTER_S})


_SURROGATE = re.compile("[\ud800-\udfff]")


def error_body(message: str, error_type: str, param: str | None, code: str | None) -> bytes:
    """The OpenAI error shape every client SDK understands. A message quoting the client's
    input may hold a lone surrogate (a JSON escape, or a header's non-UTF-8 byte): it is
    written as U+FFFD, since an escaped lone surrogate is JSON strict parsers refuse."""
    if not message.isascii():
        message = _SURROGATE.sub("\ufffd", message)  # one U+FFFD each, as the text showed
    payload = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")
