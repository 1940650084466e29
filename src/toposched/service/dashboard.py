"""The web dashboard at `/` (docs/dashboard.md): static files from the package, and the map's
JSON: one domain's children with their aggregates, never every node or GPU.

`GET /v1/map?level=L&index=I` answers the children of domain I of level L (default: the whole
cluster) with GPUs, free GPUs, node health counts and the GPUs each account holds there. The
sums come from per-node arrays over the domain's contiguous node range (numpy, no Python loop
over nodes) and one pass over the running allocations. A domain of the innermost level answers
its nodes, with the jobs on each.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any

import numpy as np
from fastapi import FastAPI, Query, Request
from fastapi.responses import Response
from numpy.typing import NDArray

from toposched.cluster.state import Health
from toposched.service.core import ServiceCore
from toposched.service.errors import NotFound
from toposched.service.http import Context
from toposched.service.views import AccountFilter

OTHER = "(other accounts)"
"""What a team token sees in place of the accounts it may not see."""
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/static/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}
_HEALTH_NAMES = tuple(health.name.lower() for health in Health)


@dataclass(frozen=True)
class Domain:
    """A domain of the topology by level index and domain index."""

    level: int
    index: int


def install(app: FastAPI, ctx: Context) -> None:
    """Serve the dashboard's files, `/v1/map` and `/v1/whoami`."""
    files = resources.files("toposched.service").joinpath("static")
    for path, (name, media_type) in _STATIC.items():
        _static_route(app, path, files.joinpath(name).read_bytes(), media_type)

    @app.get("/v1/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        """Who holds the token; without one, whether the server wants one (the page asks)."""
        if ctx.tokens is not None and "authorization" not in request.headers:
            return {"name": None, "role": None, "accounts": [], "token_required": True}
        principal = ctx.principal(request)
        return {
            "token_required": ctx.tokens is not None,
            "name": principal.name,
            "role": str(principal.role),
            "accounts": list(principal.accounts),
        }

    @app.get("/v1/map")
    async def cluster_map(
        request: Request,
        level: str = "cluster",
        index: Annotated[int, Query(ge=0)] = 0,
    ) -> dict[str, Any]:
        principal = ctx.principal(request)
        return await ctx.call(
            lambda core, now: map_view(core, level, index, principal.sees), writes=False
        )


def _static_route(app: FastAPI, path: str, body: bytes, media_type: str) -> None:
    @app.get(path, include_in_schema=False)
    async def static() -> Response:
        return Response(body, media_type=media_type, headers={"Cache-Control": "no-cache"})


def map_view(
    core: ServiceCore, level_name: str, index: int, visible: AccountFilter
) -> dict[str, Any]:
    """Domain `index` of level `level_name`: its path from the root and its children."""
    topology = core.scheduler.state.topology
    level = topology.level_index(level_name)
    if index >= topology.n_domains(level):
        raise NotFound(f"{level_name} domain", str(index))
    domain = Domain(level, index)
    path = [
        {
            "level": topology.domain_levels[outer],
            "index": (ancestor := topology.ancestor(level, index, outer)),
            "name": str(topology.domain_name(outer, ancestor)),
        }
        for outer in range(level + 1)
    ]
    innermost = level == len(topology.domain_levels) - 1
    children = _nodes(core, domain, visible) if innermost else _domains(core, domain, visible)
    return {
        "level": level_name,
        "index": index,
        "name": path[-1]["name"],
        "path": path,
        "child_level": "node" if innermost else topology.domain_levels[level + 1],
        "children": children,
    }


def _domains(core: ServiceCore, domain: Domain, visible: AccountFilter) -> list[dict[str, Any]]:
    state = core.scheduler.state
    topology = state.topology
    child_level = domain.level + 1
    first, last = topology.descendants(domain.level, domain.index, child_level)
    node_first, node_last = topology.domain_range(domain.level, domain.index)
    n_children = last - first
    # each node of the domain's range by its child's offset: sums are weighted counts
    child_of = topology.node_domain[child_level][node_first:node_last] - first
    gpu_count = topology.gpu_count[node_first:node_last]
    gpus = np.bincount(child_of, weights=gpu_count, minlength=n_children).astype(np.int64)
    health = state.health[node_first:node_last]
    counts = {
        name: np.bincount(child_of[health == value], minlength=n_children)
        for value, name in enumerate(_HEALTH_NAMES)
    }
    held = _held_by_account(core, topology.node_domain[child_level], first, last, visible)
    free = state.free_gpus[child_level]
    sizes = topology.domain_sizes(child_level)[first:last]
    rows = []
    for offset, child in enumerate(range(first, last)):
        rows.append(
            {
                "index": child,
                "name": str(topology.domain_name(child_level, child)),
                "nodes": int(sizes[offset]),
                "gpus": int(gpus[offset]),
                "free_gpus": int(free[child]),
                "health": {name: int(counts[name][offset]) for name in _HEALTH_NAMES},
                "held": {
                    account: round(float(values[offset]), 3)
                    for account, values in held.items()
                    if values[offset] > 0
                },
            }
        )
    return rows


def _held_by_account(
    core: ServiceCore,
    domain_of: NDArray[np.int32],
    first: int,
    last: int,
    visible: AccountFilter,
) -> dict[str, NDArray[np.float64]]:
    """GPUs each account holds in each domain `first..last-1` of one level: one pass over the
    running allocations, then one weighted count per account."""
    nodes: list[NDArray[np.int64]] = []
    weights: list[NDArray[np.float64]] = []
    owners: list[str] = []
    for owner, allocation in core.scheduler.state.allocations.items():
        record = core.records.get(owner)
        account = record.account if record is not None else OTHER
        owners.append(account if visible(account) else OTHER)
        nodes.append(allocation.nodes)
        weights.append(allocation.pod_gpus())
    if not nodes:
        return {}
    pods = np.repeat(np.arange(len(nodes)), [len(n) for n in nodes])
    domains = domain_of[np.concatenate(nodes)].astype(np.int64)
    inside = (domains >= first) & (domains < last)
    names = sorted(set(owners))
    code_of = {name: code for code, name in enumerate(names)}
    codes = np.array([code_of[o] for o in owners], dtype=np.int64)[pods[inside]]
    cells = codes * (last - first) + domains[inside] - first
    sums = np.bincount(
        cells, weights=np.concatenate(weights)[inside], minlength=len(names) * (last - first)
    ).reshape(len(names), last - first)
    return {name: sums[code] for name, code in code_of.items() if sums[code].any()}


def _nodes(core: ServiceCore, domain: Domain, visible: AccountFilter) -> list[dict[str, Any]]:
    state = core.scheduler.state
    topology = state.topology
    first, last = topology.domain_range(domain.level, domain.index)
    jobs_on: dict[int, list[dict[str, Any]]] = {}
    for owner, allocation in state.allocations.items():
        inside = (allocation.nodes >= first) & (allocation.nodes < last)
        on = allocation.nodes[inside]
        if on.size == 0:
            continue
        record = core.records.get(owner)
        account = record.account if record is not None else OTHER
        shown = visible(account)
        on_node, which = np.unique(on, return_inverse=True)
        gpus = np.bincount(which, weights=allocation.pod_gpus()[inside])
        for node, held in zip(on_node.tolist(), gpus.tolist(), strict=True):
            jobs_on.setdefault(int(node), []).append(
                {
                    "id": owner if shown else None,
                    "account": account if shown else OTHER,
                    "gpus": float(held),
                }
            )
    return [
        {
            "index": node,
            "name": topology.node_names[node],
            "gpus": int(topology.gpu_count[node]),
            "free_gpus": int(state.free_whole_gpus[node]),
            "health": _HEALTH_NAMES[int(state.health[node])],
            "jobs": jobs_on.get(node, []),
        }
        for node in range(first, last)
    ]
