"""GangRequest: what placement needs to know of a job, resolved against one cluster."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toposched.cluster.units import MILLI_PER_GPU, NODE_LEVEL
from toposched.jobs.rules import check_models_present

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from toposched.cluster.topology import Topology
    from toposched.jobs.spec import JobSpec

# numpy loads in the functions that build arrays: `check_against_cluster` runs without it, on a
# cluster file checked before its topology is built (`toposched place`).


@functools.lru_cache(maxsize=8)
def _every_model(n_models: int) -> NDArray[np.bool_]:
    import numpy as np

    allowed = np.ones(n_models, dtype=np.bool_)
    allowed.flags.writeable = False
    return allowed


@functools.lru_cache(maxsize=1024)
def _granule(slices: tuple[tuple[int, int], ...], level: int, node_slice: int) -> int:
    # Asked several times per search: a few slice layers, cached by value.
    return max((pods for slice_level, pods in slices if slice_level >= level), default=node_slice)


@functools.lru_cache(maxsize=256)
def _granules(
    slices: tuple[tuple[int, int], ...], level: int, node_slice: int
) -> NDArray[np.int64]:
    import numpy as np

    granules = np.array(
        [_granule(slices, upper, node_slice) for upper in range(level + 1)], dtype=np.int64
    )
    granules.flags.writeable = False
    return granules


@dataclass(frozen=True)
class GangRequest:
    """A gang of `pods` identical pods and its topology constraints, as level indices.

    Levels are domain-level indices of the topology (0 = whole cluster). `required` is the level
    that must hold every pod (0 when unconstrained); `preferred` the level whose domain count is
    minimised (None: fewest domains at each level below the required one). `slices` lists
    (level, pods) layers of domain levels, outermost first; `node_slice` is the slice layer at
    node level, if any (each group of that many consecutive pods on one node; 1 when none).
    `on_one_node` means `required: node`; `preferred_node`, `preferred: node` (the fewest
    nodes). `within`, a (level, domain) pair with level at most `required`, confines the gang
    to that one domain (the roles of a job that share a domain, `placement.roles`).
    """

    name: str
    pods: int
    gpus_per_pod: int
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    allowed_models: NDArray[np.int64] | None
    required: int = 0
    preferred: int | None = None
    slices: tuple[tuple[int, int], ...] = ()
    on_one_node: bool = False
    node_slice: int = 1
    preferred_node: bool = False
    within: tuple[int, int] | None = None

    @property
    def is_fractional(self) -> bool:
        return self.gpus_per_pod == 1 and self.gpu_milli < MILLI_PER_GPU

    @property
    def gpus_total(self) -> int:
        """Whole GPUs the gang needs (fractional pods count their shares)."""
        return self.pods * self.gpus_per_pod * self.gpu_milli // MILLI_PER_GPU

    def model_allowed(self, topology: Topology) -> NDArray[np.bool_]:
        """Per GPU model index of `topology` (at least one), whether the pods may use it.
        Read-only, shared when every model is: the compiled loops it is passed to see one type
        of array whatever the request (a writable one would compile them again)."""
        n_models = max(len(topology.gpu_models), 1)
        if self.allowed_models is None:
            return _every_model(n_models)
        import numpy as np

        allowed = np.zeros(n_models, dtype=np.bool_)
        allowed[self.allowed_models] = True
        allowed.flags.writeable = False
        return allowed

    def granule(self, level: int) -> int:
        """Pods a domain at `level` must hold a multiple of: the largest slice at or below it
        (node slices included)."""
        return _granule(self.slices, level, self.node_slice)

    def granules(self, level: int) -> NDArray[np.int64]:
        """`granule` of every level from 0 to `level`, by level (read-only, shared by the
        requests of one shape: for compiled loops over several levels)."""
        return _granules(self.slices, level, self.node_slice)

    def describe_pod_plain(self) -> str:
        """What one pod asks for, e.g. "4 GPUs" or "460 milli-GPU"."""
        if self.gpus_per_pod == 0:
            return "no GPU"
        if self.is_fractional:
            return f"{self.gpu_milli} milli-GPU"
        return f"{self.gpus_per_pod} GPU{'s' if self.gpus_per_pod > 1 else ''}"

    def describe_pod(self, topology: Topology) -> str:
        """`describe_pod_plain` with the allowed GPU models named."""
        what = self.describe_pod_plain()
        if self.allowed_models is not None and self.gpus_per_pod:
            names = "|".join(topology.gpu_models[int(m)].name for m in self.allowed_models)
            what += f" ({names})"
        return what

    def renamed(self, name: str) -> GangRequest:
        """This request for another job of the same shape: the fields copied as they are, not
        checked again (`dataclasses.replace` would re-run the checks, several times the cost;
        a restart adopts thousands of jobs of one shape)."""
        renamed = object.__new__(GangRequest)
        renamed.__dict__.update(self.__dict__, name=name)
        return renamed

    @staticmethod
    def from_spec(spec: JobSpec, topology: Topology) -> GangRequest:
        """Resolve a job's level and model names against `topology`; clear errors if unknown
        (`check_against_cluster`'s)."""
        import numpy as np

        check_against_cluster(spec, topology.levels, [m.name for m in topology.gpu_models])
        resources = spec.resources_per_pod
        models: NDArray[np.int64] | None = None
        if resources.gpu_models is not None and resources.gpus > 0:
            known = {m.name: i for i, m in enumerate(topology.gpu_models)}
            present = sorted({known[name] for name in resources.gpu_models if name in known})
            models = np.array(present, dtype=np.int64)
        required = spec.topology.required
        on_one_node = required == NODE_LEVEL
        slices: list[tuple[int, int]] = []
        node_slice = 1
        for layer in spec.topology.slices:
            if layer.level == NODE_LEVEL:
                node_slice = layer.pods  # validated innermost: no layer follows it
                continue
            slices.append((topology.level_index(layer.level, "topology.slices.level"), layer.pods))
        return GangRequest(
            name=spec.name,
            pods=spec.pods,
            gpus_per_pod=resources.gpus,
            gpu_milli=resources.gpu_milli if resources.gpus else MILLI_PER_GPU,
            cpu_milli=resources.cpu,
            memory_mib=resources.memory,
            allowed_models=models,
            required=0
            if required is None or on_one_node
            else topology.level_index(required, "topology.required"),
            preferred=None
            if spec.topology.preferred is None
            else _preferred(topology, spec.topology.preferred, bool(slices)),
            slices=tuple(slices),
            on_one_node=on_one_node,
            node_slice=node_slice,
            preferred_node=spec.topology.preferred == NODE_LEVEL and not on_one_node,
        )


def check_against_cluster(spec: JobSpec, levels: Sequence[str], gpu_models: Sequence[str]) -> None:
    """Refuse a job that names a level or only GPU models a cluster does not have, given the
    cluster's levels (outermost first) and GPU model catalogue: the errors `from_spec` raises."""
    spec.topology.validate_levels(levels, spec.pods)
    resources = spec.resources_per_pod
    check_models_present(resources.gpu_models, resources.gpus, gpu_models)


def _preferred(topology: Topology, name: str, domain_slices: bool) -> int | None:
    if name == NODE_LEVEL:
        # `preferred_node`: the fewest nodes, a search of its own; with slices at domain
        # levels, the fewest innermost domains, which the slice-aware plans minimise.
        return len(topology.levels) if domain_slices and topology.levels else None
    return topology.level_index(name, "topology.preferred")


def simple_request(
    pods: int,
    gpus_per_pod: int = 1,
    gpu_milli: int = MILLI_PER_GPU,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    name: str = "job",
    models: Sequence[int] | None = None,
    required: int = 0,
    preferred: int | None = None,
    slices: Sequence[tuple[int, int]] = (),
    node_slice: int = 1,
    preferred_node: bool = False,
) -> GangRequest:
    """A request built directly from level indices (benchmarks, evaluations and tests)."""
    import numpy as np

    return GangRequest(
        name=name,
        pods=pods,
        gpus_per_pod=gpus_per_pod,
        gpu_milli=gpu_milli,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        allowed_models=None if models is None else np.asarray(models, dtype=np.int64),
        required=required,
        preferred=preferred,
        slices=tuple(slices),
        node_slice=node_slice,
        preferred_node=preferred_node,
    )
