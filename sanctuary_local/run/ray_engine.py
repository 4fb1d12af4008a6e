"""``run --engine ray`` (issue 30): the same stages on a Ray cluster. Why this mapping, and
what it was measured against: ``docs/scale-out.md``.

Only *where* work runs changes. The driver (this process) keeps everything else of the
local engine: the stage order, the time budget, resume, the reporter, and it is the one
writer of the stage files, appending a claim's record only if the claim is not there yet
(``StageFile.append``), so a task Ray retries after a crash is still written once.

- An LLM stage runs in actors that each hold the stage's model (``LLMWorker``): one per GPU
  on ``vllm``, one per ``n_threads`` CPUs on ``llama_cpp``, or ``--ray-actors``. Waves go to
  whichever actor is free; an actor whose process dies is restarted (model reloaded) and
  its wave re-run (``max_restarts``/``max_task_retries``). The actors die with the stage, as
  the local engine releases a model before the next stage loads its own.
- Stage 2 runs as CPU tasks over shards of claims (``ray_tasks.retrieve_shard``); Ray
  re-runs a shard whose worker died (``max_retries``).

Ray is imported here only, when a run asks for it; with no ``--ray-address`` a local
cluster starts for the run and is shut down at its end (tested: no Ray process is left).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sanctuary_local.errors import UserError
from sanctuary_local.records import HydeResult
from sanctuary_local.run.ray_tasks import TASK_RETRIES, retrieve_on_ray
from sanctuary_local.run.waves import resilient, waves

__all__ = ["ACTOR_RESTARTS", "NAMESPACE", "TASK_RETRIES", "LLMWorker", "RayEngine", "import_ray", "placement"]

log = logging.getLogger("sanctuary_local")

#: How often Ray restarts a dead LLM actor (a wave whose actor died is re-run ``TASK_RETRIES`` times).
ACTOR_RESTARTS = 3
#: The Ray namespace of a run's actors (named ``sanctuary-llm-<stage>-<i>``).
NAMESPACE = "sanctuary_local"


def import_ray() -> Any:
    """``ray``, with usage statistics off (never phone home); a clear error without it."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # a node's raylet waits this long for its agents to start: 15-30 s by default, which a
    # busy machine overran (the agents are Python processes importing a lot)
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    try:
        import ray
    except ImportError as exc:
        raise UserError("--engine ray needs Ray: pip install -e '.[ray]'") from exc
    return ray


class LLMWorker:
    """A Ray actor (``ray.remote(LLMWorker)``) holding one stage's model. ``run`` is the local
    engine's wave: the stage's work, a failing wave split in halves (``waves.resilient``)."""

    def __init__(self, factory: Callable[..., Any], llm_cfg: Any, models_dir: str, work: Callable[..., Any],
                 fallback: Callable[..., Any]) -> None:
        self.backend = factory(llm_cfg, models_dir)
        self.work, self.fallback = work, fallback

    def run(self, wave: list[Any]) -> tuple[list[Any], float]:
        t = time.perf_counter()
        out = resilient(wave, lambda w: self.work(self.backend, w), self.fallback)
        return out, (time.perf_counter() - t) / len(wave)

    def pid(self) -> int:
        return os.getpid()


def _shippable(factory: Callable[..., Any]) -> Callable[..., Any]:
    """The backend factory, made loadable in Ray's workers: one defined outside the package
    (a test's or a benchmark's stand-in, swapped in for ``llm.make_backend``) is pickled by
    value, since a worker cannot import the module it came from."""
    import ray.cloudpickle as cp

    mod = getattr(factory, "__module__", "") or ""
    if not mod.startswith("sanctuary_local") and mod in sys.modules:
        cp.register_pickle_by_value(sys.modules[mod])
    return factory


def placement(resources: dict[str, float], llm_cfg: Any, actors: int | None = None) -> tuple[int, dict[str, float]]:
    """How many model actors a stage gets on a cluster with ``resources``, and what each
    asks for: one per GPU on ``vllm``; one client on ``openai_http`` (the server holds the
    model); on CPU one per ``n_threads`` CPUs (llama.cpp is fastest at threads = cores).
    ``actors`` (``--ray-actors``) overrides the count. See docs/scale-out.md."""
    gpus, cpus = int(resources.get("GPU", 0)), float(resources.get("CPU", 1))
    if llm_cfg.backend == "vllm" and gpus:
        return actors or gpus, {"num_gpus": 1, "num_cpus": 1}
    if llm_cfg.backend == "openai_http":
        return actors or 1, {"num_cpus": min(1.0, cpus)}
    threads = max(1, int(llm_cfg.n_threads or os.cpu_count() or 1))
    n = actors or max(1, int(cpus // threads))
    share = min(float(threads), cpus / n)
    return n, {"num_cpus": share if share < 1 else float(int(share))}  # Ray: fractions only below 1


class RayEngine:
    """LLM waves on model-holding actors, retrieval as tasks (see the module's docstring)."""

    def __init__(self, address: str | None = None, actors: int | None = None) -> None:
        self.ray = import_ray()
        if actors is not None and actors <= 0:
            raise UserError("--ray-actors must be > 0")
        self.address, self.actors = address, actors
        self.started = False  # whether this engine started the cluster connection (and so ends it)
        self.n_stages = 0

    def connect(self) -> Any:
        """Join ``address``, or start a local cluster (no dashboard); reuse a connection the
        caller already made (it then stays the caller's to shut down)."""
        ray = self.ray
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            except Exception as exc:  # noqa: BLE001 - Ray raises bare Exceptions on start-up failures
                ray.shutdown()  # what did start of a local cluster stops
                where = f"join the Ray cluster at {self.address}" if self.address else "start a local Ray cluster"
                raise UserError(f"--engine ray: could not {where}: {str(exc).splitlines()[0] if str(exc) else exc!r}"
                                " (a heavily loaded machine can make a local cluster's start time out: retry, "
                                "or start one with `ray start --head` and pass --ray-address auto)") from exc
            self.started = True
            log.info("ray: %s, resources %s", self.address or "local cluster", ray.cluster_resources())
        return ray

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
        self.started = False

    def start_actors(self, llm_cfg: Any, models_dir: str, work: Callable[..., Any],
                     fallback: Callable[..., Any]) -> list[Any]:
        """The stage's model actors, each with its model loaded when this returns."""
        import sanctuary_local.llm as llm

        ray = self.connect()
        n, resources = placement(ray.cluster_resources(), llm_cfg, self.actors)
        cls = ray.remote(max_restarts=ACTOR_RESTARTS, max_task_retries=TASK_RETRIES)(LLMWorker)
        factory = _shippable(llm.make_backend)
        self.n_stages += 1
        actors = [cls.options(name=f"sanctuary-llm-{self.n_stages}-{i}", **resources)
                  .remote(factory, llm_cfg, str(Path(models_dir).resolve()), work, fallback) for i in range(n)]
        ray.get([a.pid.remote() for a in actors])
        log.info("ray: %d model actor(s) for %s (%s each)", n, llm_cfg.model, resources)
        return actors

    def llm_waves(self, st: Any, llm_cfg: Any, models_dir: str, todo: list[Any], size: int,
                  work: Callable[[Any, list[Any]], list[Any]],
                  fallback: Callable[[Any, Exception], Any]) -> Iterator[tuple[list[Any], list[Any], float]]:
        """``waves.llm_waves`` on the actors: waves in completion order, each actor given its
        next wave before the driver records the last one, the actors killed at the end."""
        ray = self.ray
        actors = st.timed_load(lambda: self.start_actors(llm_cfg, models_dir, work, fallback))
        queue = iter(waves(todo, size))
        inflight: dict[Any, tuple[Any, list[Any]]] = {}

        def feed(actor: Any) -> None:
            wave = next(queue, None)
            if wave is not None:
                inflight[actor.run.remote(wave)] = (actor, wave)

        alive = list(actors)
        try:
            for a in actors:
                feed(a)
            while inflight:
                (ref,), _ = ray.wait(list(inflight), num_returns=1)
                actor, wave = inflight.pop(ref)
                try:
                    results, per = ray.get(ref)
                    feed(actor)
                except ray.exceptions.RayError as exc:  # its restarts used up: fallbacks, as a failed claim gets
                    log.error("ray: a model actor failed for good (%s); its wave gets fallback records", exc)
                    results, per = [fallback(x, exc) for x in wave], 0.0
                    alive.remove(actor)
                    if not alive:  # no model left: every wave still queued falls back too
                        rest = [x for w in queue for x in w]
                        wave, results = wave + rest, results + [fallback(x, exc) for x in rest]
                yield wave, results, per
        finally:
            if ray.is_initialized():
                for a in actors:
                    ray.kill(a, no_restart=True)  # the model is released before the next stage loads its own

    def retrieve(self, store: Any, todo: list[HydeResult], cfg: Any, **kw: Any) -> None:
        """Stage 2 as Ray tasks over shards of claims (``ray_tasks.retrieve_on_ray``)."""
        retrieve_on_ray(self.connect(), store, todo, cfg, **kw)


