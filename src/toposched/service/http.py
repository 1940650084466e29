"""HTTP plumbing shared by the routes: the one error shape, bodies read under a size limit,
tokens checked, and calls into the loop awaited."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from toposched.cluster.errors import InputError, ToposchedError
from toposched.service.auth import OPEN_ACCESS, Principal, Tokens
from toposched.service.core import ServiceCore
from toposched.service.documents import parse_body, short
from toposched.service.errors import Conflict, Forbidden, NeverFits, NotFound
from toposched.service.loop import Loop

T = TypeVar("T")
log = logging.getLogger("toposched.service")
_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    500: "internal",
    503: "unavailable",
}
_MEDIA_TYPES = ("application/json", "application/yaml", "application/x-yaml", "text/yaml")


class ApiError(Exception):
    """An answer other than success, in the one error shape of docs/api.md."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        field: str | None = None,
        value: Any = None,
        rule: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.field = field
        self.value = value
        self.rule = rule

    def response(self) -> JSONResponse:
        error: dict[str, Any] = {"status": self.status, "code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
            error["value"] = short(self.value) if self.value is not None else None
            if self.rule is not None:
                error["rule"] = self.rule
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse({"error": error}, status_code=self.status, headers=headers)


def api_error(error: Exception) -> ApiError:
    """The HTTP answer for an error raised by a command or a check."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, NeverFits):
        return ApiError(
            422, short(str(error), 300), "never_fits", error.field, error.value, error.rule
        )
    if isinstance(error, InputError):
        return ApiError(
            422, short(str(error), 300), "invalid", error.field, error.value, error.rule
        )
    if isinstance(error, NotFound):
        return ApiError(404, str(error), field=error.field, value=error.value)
    if isinstance(error, Conflict):
        return ApiError(
            409, short(str(error), 300), field=error.field, value=error.value, rule=error.rule
        )
    if isinstance(error, Forbidden):
        return ApiError(403, str(error))
    if isinstance(error, ToposchedError):
        return ApiError(400, str(error))
    log.error("unexpected error: %s", type(error).__name__, exc_info=error)
    return ApiError(500, "internal error; the server log has the details")


async def on_error(request: Request, error: Exception) -> JSONResponse:
    return api_error(error).response()


async def on_http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    return ApiError(error.status_code, str(error.detail)).response()


async def on_validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    first = error.errors()[0] if error.errors() else {}
    location = [str(part) for part in first.get("loc", ())[1:]]
    field = ".".join(location) or "request"
    rule = str(first.get("msg", "is invalid"))
    value = first.get("input")
    return ApiError(
        422, f"{field}: {short(value)!r} is invalid: {rule}", "invalid", field, value, rule
    ).response()


@dataclass
class Context:
    """What the routes share: the loop, the tokens (None: open access on loopback), limits."""

    loop: Loop
    tokens: Tokens | None
    max_body: int

    async def call(self, apply: Callable[[ServiceCore, float], T], writes: bool = True) -> T:
        """Run `apply(core, now)` in the loop; answer after its commit."""
        self.require_ready()
        try:
            return await self.loop.submit_async(apply, writes)
        except Exception as error:
            raise api_error(error) from None

    def require_ready(self) -> None:
        if self.loop.failed is not None:
            raise ApiError(503, "the scheduler loop stopped; see the server log")
        if not self.loop.ready.is_set():
            raise ApiError(503, "starting: the scheduler is being rebuilt from the store")

    def principal(self, request: Request) -> Principal:
        return self.principal_of(request.headers.get("authorization", ""))

    def principal_of(self, authorization: str) -> Principal:
        """Who sends a request with this Authorization header."""
        if self.tokens is None:
            return OPEN_ACCESS
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "an Authorization: Bearer TOKEN header is required")
        principal = self.tokens.principal(token.strip())
        if principal is None:
            raise ApiError(401, "the token is not known")
        return principal

    async def document(self, request: Request) -> Any:
        """The request's body as a document (JSON or YAML), at most `max_body` bytes."""
        content_type = request.headers.get("content-type", "application/json")
        self.check_media_type(content_type)
        self.check_length(request.headers.get("content-length"))
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise self.too_large()
            chunks.append(chunk)
        return self.document_of(b"".join(chunks), content_type)

    @staticmethod
    def check_media_type(content_type: str) -> None:
        if content_type.split(";")[0].strip().lower() not in _MEDIA_TYPES:
            raise ApiError(
                415,
                "bodies are application/json or application/yaml",
                field="Content-Type",
                value=content_type,
                rule="must be application/json or application/yaml",
            )

    def check_length(self, declared: str | None) -> None:
        """A body declared larger than `max_body` is refused before it is read."""
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise self.too_large()

    @staticmethod
    def document_of(body: bytes, content_type: str) -> Any:
        try:
            return parse_body(body, content_type)
        except InputError as error:
            raise api_error(error) from None

    def too_large(self) -> ApiError:
        return ApiError(
            413,
            f"the body is larger than {self.max_body} bytes",
            field="body",
            value="(too large)",
            rule=f"at most {self.max_body} bytes",
        )


def require_admin(principal: Principal) -> None:
    if not principal.admin:
        raise ApiError(403, "this needs an admin token")
