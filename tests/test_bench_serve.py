"""The restart benchmark's store, filled directly: a state the service recovers as written."""

from __future__ import annotations

from pathlib import Path

from toposched.backends.dry_run import DryRunBackend
from toposched.bench.cycle import team_tree
from toposched.bench.serve import fill_store
from toposched.cluster.builders import million_gpu_cluster
from toposched.service.recovery import recover
from toposched.service.store import Store

NOW = 1_800_000_000.0


def test_a_filled_store_recovers_with_its_running_and_pending_jobs(tmp_path: Path) -> None:
    running = fill_store(tmp_path / "s.db", pending=200, now=NOW, max_running=400)
    assert running == 400
    store = Store(str(tmp_path / "s.db"))
    backend = DryRunBackend()
    core = recover(store, million_gpu_cluster(), team_tree, backend, NOW)
    scheduler = core.scheduler
    assert len(scheduler.running) == 400 and len(scheduler.queue) == 200
    assert len(backend.running()) == 400
    held = sum(float(job.gpus) for job in scheduler.running.values())
    assert scheduler.state.total_free_gpus == scheduler.state.topology.n_gpus - held
    # The fleet is not covered here, so whole-rack gangs fit in its empty racks too.
    bound = {decision.job_id for decision in scheduler.cycle(NOW + 1).bound}
    assert {"wait-0", "wait-100"} <= bound
    store.close()
