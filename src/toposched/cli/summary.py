"""Terminal tables shared by CLI subcommands."""

from __future__ import annotations

from rich.table import Table

from toposched.cluster.state import ClusterState


def cluster_table(state: ClusterState, title: str, build_seconds: float | None = None) -> Table:
    """Levels, domains per level, nodes, GPUs, memory and build time of a cluster."""
    top = state.topology
    table = Table(title=title, title_justify="left")
    table.add_column("level")
    table.add_column("domains", justify="right")
    table.add_column("nodes per domain", justify="right")
    table.add_column("GPUs per domain", justify="right")
    for level, name in enumerate(top.domain_levels):
        sizes = top.domain_sizes(level)
        gpus = state.free_gpus[level]  # a fresh state: free equals capacity on healthy nodes
        span = (
            f"{sizes.min():,}" if sizes.min() == sizes.max() else f"{sizes.min():,}-{sizes.max():,}"
        )
        gspan = f"{gpus.min():,}" if gpus.min() == gpus.max() else f"{gpus.min():,}-{gpus.max():,}"
        table.add_row(name, f"{top.n_domains(level):,}", span, gspan)
    models = ", ".join(m.name for m in top.gpu_models if m.name) or "-"
    table.caption = (
        f"{top.n_nodes:,} nodes, {top.n_gpus:,} GPUs ({models}); "
        f"state {state.nbytes() / 2**20:.1f} MiB"
        + (f"; built in {build_seconds * 1e3:.0f} ms" if build_seconds is not None else "")
    )
    table.caption_justify = "left"
    return table
