"""Stage 2 of ``--engine ray``: claims sharded into Ray tasks (``retrieve_on_ray``, in the
driver), each shard retrieved in a Ray worker process (``retrieve_shard``).

A Ray worker process runs many tasks one after the other, so the retriever (its embedding
models) and the opened store are kept per process, as a pool worker keeps them
(``stages/evidence.py``), and loaded again only for another store or config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sanctuary_local.records import ClaimEvidence, HydeResult, Query, QueryEvidence

__all__ = ["MAX_SHARD", "TASK_RETRIES", "prepare_static", "retrieve_on_ray", "retrieve_shard"]

#: Claims per retrieval task at most (a shard is also at most 1/4 of a CPU's share).
MAX_SHARD = 8
#: How often Ray re-runs a shard whose worker process died (and an LLM wave whose actor died).
TASK_RETRIES = 3
Shard = list[tuple[int, tuple[Query, ...]]]


def retrieve_on_ray(ray: Any, store: Any, todo: list[HydeResult], cfg: Any, *, models_dir: Any = "models",
                    workers: int | None = None, on_result: Callable[[ClaimEvidence], None] | None = None,
                    should_stop: Callable[[], bool] | None = None) -> None:
    """``run_retrieval``'s contract on Ray: ``on_result`` gets each claim here, in the driver,
    as its shard finishes; once ``should_stop()`` is true no shard starts, the ones in flight
    finish. ``workers`` caps the shards in flight (default: the cluster's CPUs)."""
    prepare_static(cfg, models_dir)  # a static model is distilled once, not once per worker
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    size = max(1, min(MAX_SHARD, -(-len(todo) // (4 * cpus))))
    task = ray.remote(max_retries=TASK_RETRIES, num_cpus=1)(retrieve_shard)
    shards = [[(h.claim_index, tuple(h.queries)) for h in todo[i:i + size]] for i in range(0, len(todo), size)]
    # absolute: a worker's directory is not the driver's (on a cluster: a path every node mounts)
    store_path, models_path = str(Path(store).resolve()), str(Path(models_dir).resolve())
    cap, pending = max(1, workers or cpus), iter(shards)
    inflight: dict[Any, Shard] = {}
    while True:
        while len(inflight) < cap and not (should_stop and should_stop()) and (shard := next(pending, None)):
            inflight[task.remote(store_path, cfg, models_path, shard)] = shard
        if not inflight:
            return
        done, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
        for ref in done:
            for ev in _shard_results(ray, ref, inflight.pop(ref)):
                if on_result is not None:
                    on_result(ev)


def _shard_results(ray: Any, ref: Any, shard: Shard) -> list[ClaimEvidence]:
    """A finished shard's evidence; a shard whose retries are used up flags its claims as
    the local pool flags a dead worker's (``WORKER_FAILED``: redone on resume)."""
    from sanctuary_local.stages.evidence import WORKER_FAILED

    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        msg = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return [ClaimEvidence(i, tuple(QueryEvidence(q) for q in qs), (f"{WORKER_FAILED}: {msg}",)) for i, qs in shard]

_LOADED: dict[str, Any] = {}


def retrieve_shard(store_path: str, cfg: Any, models_dir: str, shard: Shard) -> list[ClaimEvidence]:
    """Each claim of ``shard`` (index, its queries) retrieved as the local pool retrieves it;
    a missing store flags every claim ``store_missing``, as the pool does."""
    from sanctuary_local.stages import evidence

    if not Path(store_path).exists():
        return [ClaimEvidence(i, tuple(QueryEvidence(q) for q in qs), ("store_missing",)) for i, qs in shard]
    key = repr((store_path, cfg, models_dir))
    if _LOADED.get("key") != key:
        evidence._init_worker(cfg, models_dir, store_path)
        _LOADED["key"] = key
    return [evidence._one_claim(i, qs) for i, qs in shard]


def prepare_static(cfg: Any, models_dir: Any) -> None:
    """Distil (or find cached) the ``static:`` models ``cfg`` names, in the driver, once."""
    from sanctuary_local.stages.evidence import _prepare_static

    _prepare_static(cfg, models_dir)
