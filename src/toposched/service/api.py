"""The HTTP API of docs/api.md: a FastAPI app over the service's loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException

from toposched.cluster.errors import InputError
from toposched.scheduler.jobs import JobState
from toposched.service import commands, dashboard, metrics, views
from toposched.service.auth import Principal
from toposched.service.commands import NODE_ACTIONS, Submission
from toposched.service.core import ServiceCore
from toposched.service.documents import body_hash, split_job
from toposched.service.http import (
    ApiError,
    Context,
    api_error,
    on_error,
    on_http_error,
    on_validation_error,
    require_admin,
)
from toposched.service.store_protocol import StateStore

MAX_KEY = 200
_EVENT_BATCH = 500
_TAIL_BLOCK = 1 << 16


def create_app(ctx: Context, store: StateStore) -> FastAPI:
    app = FastAPI(
        title="toposched",
        version="1",
        description="Topology-aware GPU scheduling as a service (docs/api.md).",
    )
    app.add_exception_handler(ApiError, on_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(Exception, on_error)
    _health_routes(app, ctx)
    _submit_route(app, ctx)
    _job_read_routes(app, ctx)
    _job_change_routes(app, ctx)
    _cluster_routes(app, ctx)
    _event_routes(app, ctx, store)
    metrics.install(app, ctx)
    dashboard.install(app, ctx)
    return app


def _health_routes(app: FastAPI, ctx: Context) -> None:
    @app.get("/v1/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/ready")
    async def ready() -> dict[str, str]:
        ctx.require_ready()
        return {"status": "ready"}


def _submit_route(app: FastAPI, ctx: Context) -> None:
    @app.post("/v1/jobs", status_code=201)
    async def submit(
        request: Request, idempotency_key: Annotated[str | None, Header()] = None
    ) -> JSONResponse:
        principal = ctx.principal(request)
        check_key(idempotency_key)
        return await submission(ctx, principal, idempotency_key, await ctx.document(request))


def check_key(idempotency_key: str | None) -> None:
    if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_KEY:
        raise ApiError(
            422,
            "Idempotency-Key must be 1 to 200 characters",
            field="Idempotency-Key",
            value=idempotency_key,
            rule="1 to 200 characters",
        )


async def submission(
    ctx: Context, principal: Principal, idempotency_key: str | None, document: Any
) -> JSONResponse:
    """POST /v1/jobs once its token, key and body are read: 201 with the new job, or 200 with
    the job an earlier submission of the same key made."""
    fields, run = _split(document)
    account = fields.get("account", "default")
    if not isinstance(account, str) or not principal.sees(account):
        raise ApiError(403, f"this token cannot submit to account {str(account)[:80]!r}")
    # The body's hash tells a retry from a reuse of its key: without a key there is none.
    digest = None if idempotency_key is None else body_hash(document)
    submission = Submission(fields, run, _scoped(principal, idempotency_key), digest)

    def apply(core: ServiceCore, now: float) -> tuple[dict[str, Any], bool]:
        record, created = commands.submit(core, submission, now)
        return views.job_view(core, record), created

    view, created = await ctx.call(apply)
    return JSONResponse(view, status_code=201 if created else 200)


def _job_read_routes(app: FastAPI, ctx: Context) -> None:
    @app.get("/v1/jobs")
    async def list_jobs(
        request: Request,
        account: str | None = None,
        state: JobState | None = None,
        limit: Annotated[int, Query(ge=1, le=views.MAX_LIST)] = 100,
        after: str | None = None,
    ) -> dict[str, Any]:
        principal = ctx.principal(request)
        return await ctx.call(
            lambda core, now: views.list_jobs(core, principal.sees, account, state, limit, after),
            writes=False,
        )

    @app.get("/v1/jobs/{job_id:path}/explain")
    async def explain(request: Request, job_id: str) -> dict[str, Any]:
        principal = ctx.principal(request)

        def read(core: ServiceCore, now: float) -> dict[str, Any]:
            return views.explain_view(core, views.visible_job(core, job_id, principal.sees), now)

        return await ctx.call(read, writes=False)

    @app.get("/v1/jobs/{job_id:path}/pods/{rank}/log", response_class=PlainTextResponse)
    async def pod_log(
        request: Request, job_id: str, rank: int, tail: Annotated[int, Query(ge=1)] = 1000
    ) -> PlainTextResponse:
        principal = ctx.principal(request)

        def where(core: ServiceCore, now: float) -> str | None:
            views.visible_job(core, job_id, principal.sees)
            return core.backend.log_path(job_id, rank)

        path = await ctx.call(where, writes=False)
        if path is None or not Path(path).exists():
            raise ApiError(404, f"no log of pod {rank} of job {job_id!r} on this server")
        return PlainTextResponse(await asyncio.to_thread(_tail, Path(path), tail))

    @app.get("/v1/jobs/{job_id:path}")
    async def get_job(request: Request, job_id: str) -> dict[str, Any]:
        principal = ctx.principal(request)
        return await ctx.call(
            lambda core, now: views.job_view(core, views.visible_job(core, job_id, principal.sees)),
            writes=False,
        )


def _job_change_routes(app: FastAPI, ctx: Context) -> None:
    @app.delete("/v1/jobs/{job_id:path}")
    async def cancel(request: Request, job_id: str) -> dict[str, Any]:
        principal = ctx.principal(request)

        def apply(core: ServiceCore, now: float) -> dict[str, Any]:
            views.visible_job(core, job_id, principal.sees)
            return views.job_view(core, commands.cancel(core, job_id, now))

        return await ctx.call(apply)

    @app.patch("/v1/jobs/{job_id:path}")
    async def change(request: Request, job_id: str) -> dict[str, Any]:
        principal = ctx.principal(request)
        document = await ctx.document(request)
        if not isinstance(document, dict) or set(document) != {"priority"}:
            raise ApiError(
                422,
                'the body must be {"priority": N}',
                field="body",
                value=document,
                rule='must be {"priority": N}',
            )

        def apply(core: ServiceCore, now: float) -> dict[str, Any]:
            views.visible_job(core, job_id, principal.sees)
            record = commands.set_priority(core, job_id, document["priority"], now)
            return views.job_view(core, record)

        return await ctx.call(apply)


def _split(document: Any) -> tuple[dict[str, Any], Any]:
    try:
        return split_job(document)
    except InputError as error:
        raise api_error(error) from None


def _scoped(principal: Principal, key: str | None) -> str | None:
    """Keys are per token holder: two teams choosing the same key make two jobs."""
    # A JSON pair: unambiguous whatever the name holds, and no NUL (PostgreSQL text has none).
    return None if key is None else json.dumps([principal.name, key])


def _tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a file, read from its end in blocks (logs grow large)."""
    with path.open("rb") as handle:
        end = handle.seek(0, 2)
        start = end
        data = b""
        while start > 0 and data.count(b"\n") <= lines:
            start = max(0, start - _TAIL_BLOCK)
            handle.seek(start)
            data = handle.read(end - start)
    text = data.decode("utf-8", errors="replace")
    return "".join(text.splitlines(keepends=True)[-lines:])


def _cluster_routes(app: FastAPI, ctx: Context) -> None:
    @app.get("/v1/queue")
    async def queue(request: Request, account: str | None = None) -> dict[str, Any]:
        principal = ctx.principal(request)
        return await ctx.call(
            lambda core, now: views.queue_view(core, now, principal.sees, account), writes=False
        )

    @app.get("/v1/nodes")
    async def nodes(
        request: Request,
        level: str | None = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
        after: str | None = None,
    ) -> dict[str, Any]:
        principal = ctx.principal(request)
        if level is not None:
            return await ctx.call(lambda core, now: views.level_rows(core, level), writes=False)
        return await ctx.call(
            lambda core, now: views.node_rows(core, principal.sees, limit, after), writes=False
        )

    @app.post("/v1/nodes/{name}/{action}")
    async def node_action(request: Request, name: str, action: str) -> dict[str, Any]:
        require_admin(ctx.principal(request))
        if action not in NODE_ACTIONS:
            raise ApiError(404, f"no node action {action!r}; actions are {', '.join(NODE_ACTIONS)}")

        def apply(core: ServiceCore, now: float) -> dict[str, Any]:
            commands.node_action(core, name, action, now)
            return views.one_node(core, name)

        return await ctx.call(apply)

    @app.get("/v1/policy")
    async def policy(request: Request) -> dict[str, Any]:
        ctx.principal(request)
        return await ctx.call(lambda core, now: views.policy_view(core), writes=False)

    @app.get("/v1/accounts")
    async def accounts(request: Request) -> dict[str, Any]:
        principal = ctx.principal(request)
        return await ctx.call(
            lambda core, now: views.accounts_view(core, now, principal.sees), writes=False
        )

    @app.put("/v1/accounts")
    async def replace_accounts(request: Request) -> dict[str, Any]:
        principal = ctx.principal(request)
        require_admin(principal)
        document = await ctx.document(request)

        def apply(core: ServiceCore, now: float) -> dict[str, Any]:
            commands.replace_tree(core, document, now)
            return views.accounts_view(core, now, principal.sees)

        return await ctx.call(apply)


def _event_routes(app: FastAPI, ctx: Context, store: StateStore) -> None:
    @app.get("/v1/events")
    async def events(
        request: Request,
        after: Annotated[int | None, Query(ge=0)] = None,
        follow: bool = True,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> StreamingResponse:
        principal = ctx.principal(request)
        ctx.require_ready()
        start = after if after is not None else _event_id(last_event_id)
        stream = _event_stream(request, store, principal, start, follow)
        return StreamingResponse(stream, media_type="text/event-stream")


def _event_id(header: str | None) -> int:
    if header is None:
        return 0
    if not header.isdigit():
        raise ApiError(
            422,
            "Last-Event-ID must be an event id",
            field="Last-Event-ID",
            value=header,
            rule="an integer >= 0",
        )
    return int(header)


async def _event_stream(
    request: Request, store: StateStore, principal: Principal, after: int, follow: bool
) -> AsyncIterator[str]:
    last = after
    idle = 0.0
    while True:
        batch = await asyncio.to_thread(store.events_after, last, _EVENT_BATCH)
        for event in batch:
            last = event.event_id
            if event.account is None and not principal.admin:
                continue
            if event.account is not None and not principal.sees(event.account):
                continue
            yield f"id: {event.event_id}\ndata: {json.dumps(event.document())}\n\n"
        if len(batch) == _EVENT_BATCH:
            continue
        if not follow or await request.is_disconnected():
            return
        await asyncio.sleep(0.2)
        idle += 0.2
        if idle >= 15:
            idle = 0.0
            yield ": keep-alive\n\n"
