"""POST /v1/jobs answered in plain ASGI, ahead of FastAPI's routing and middleware.

Submissions are the service's hot path: under load, FastAPI's per-request machinery
(middleware, dependency solving, exit stacks) cost about as much as everything the service
itself does for a submission. `SubmitFront` reads the token, key and body itself and calls the
route's own `submission`, so the answers, checks and error shapes are those of the route, which
stays in the app for its schema (/docs) and for every request the front passes on.

While the scheduler is being rebuilt from the store, the front also answers the API's requests
that would wait for it (503, after the token is checked, as the routes check it), so that the
clients polling a restarting server for readiness cost it next to nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.responses import Response

from toposched.service.api import check_key, submission
from toposched.service.http import ApiError, Context, api_error

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
log = logging.getLogger("toposched.service")


_API = "/v1/"
_ANSWERED_WHILE_STARTING = frozenset({"/v1/health", "/v1/whoami"})
"""API paths whose routes answer without the scheduler."""
_READY = "/v1/ready"
"""The one API path answered without a token."""


class SubmitFront:
    """An ASGI app: POST /v1/jobs is answered here, and while the loop is not ready the API's
    requests that wait for it; every other request by `app`."""

    def __init__(self, app: ASGIApp, ctx: Context) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if not self.ctx.loop.ready.is_set() and _waits_for_the_loop(path):
            await self._not_ready(scope, receive, send)
            return
        if scope["method"] != "POST" or path != "/v1/jobs":
            await self.app(scope, receive, send)
            return
        response: Response
        try:
            response = await self._submit(scope, receive)
        except ApiError as error:
            response = error.response()
        except Exception as error:  # a bug: the one error shape, as the app's own handler does
            response = api_error(error).response()
        await response(scope, receive, send)

    async def _not_ready(self, scope: Scope, receive: Receive, send: Send) -> None:
        """503 (starting, or the loop stopped) after the token's check, as the route answers;
        the route's own answer if the loop became ready meanwhile."""
        try:
            if scope["path"] != _READY:
                self.ctx.principal_of(_headers(scope).get("authorization", ""))
            self.ctx.require_ready()
        except ApiError as error:
            await error.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _submit(self, scope: Scope, receive: Receive) -> Response:
        headers = _headers(scope)
        ctx = self.ctx
        principal = ctx.principal_of(headers.get("authorization", ""))
        key = headers.get("idempotency-key")
        check_key(key)
        content_type = headers.get("content-type", "application/json")
        ctx.check_media_type(content_type)
        ctx.check_length(headers.get("content-length"))
        document = ctx.document_of(await self._body(receive), content_type)
        return await submission(ctx, principal, key, document)

    async def _body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                raise ApiError(400, "the request body ended early")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.ctx.max_body:
                raise self.ctx.too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        # The first of repeated headers, as Starlette's `Headers.get` reads them.
        headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return headers


def _waits_for_the_loop(path: str) -> bool:
    return path.startswith(_API) and path not in _ANSWERED_WHILE_STARTING
