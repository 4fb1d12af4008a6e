"""An LLM stage wave by wave: the model loaded once, each wave's records saved as soon as
it is done, a failing wave split in halves down to single claims (which get a fallback)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import TYPE_CHECKING, Any, TypeVar

from sanctuary_local.records import Claim
from sanctuary_local.run.stage_files import StageFile

if TYPE_CHECKING:
    from sanctuary_local.run.state import RunState

__all__ = ["engine_waves", "generate", "llm_waves", "resilient", "trained_waves", "wave_size",
           "waves"]

log = logging.getLogger("sanctuary_local")
R = TypeVar("R")


def llm_waves(st: Any, llm_cfg: Any, models_dir: str, todo: list[Any], size: int,
              run: Callable[[Any, list[Any]], list[R]],
              fallback: Callable[[Any, Exception], R]) -> Iterator[tuple[list[Any], list[R], float]]:
    """Load a stage's model once, run ``todo`` wave by wave (a failing wave is split,
    see ``resilient``), yield ``(wave, results, seconds per item)``, then release the
    model so the next stage's can load."""
    from sanctuary_local.llm import make_backend

    backend = st.timed_load(lambda: make_backend(llm_cfg, models_dir))
    try:
        for wave in waves(todo, size):
            t = time.perf_counter()
            results = resilient(wave, lambda w: run(backend, w), fallback)
            yield wave, results, (time.perf_counter() - t) / len(wave)
    finally:
        backend.close()


#: Claims per call of a trained verdict model (one batch of its encoder).
TRAINED_WAVE = 16


def trained_waves(verdict_cfg: Any, st: Any, llm_cfg: Any, models_dir: str, todo: list[Any], size: int,
                  run: Callable[[Any, list[Any]], list[R]], fallback: Callable[[Any, Exception], R],
                  load: Callable[[str, bool, int], Any] | None = None) -> Iterator[tuple[list[Any], list[R], float]]:
    """``llm_waves`` for stage 3's trained mode: the verdict model (``verdict.trained_model``)
    loaded once in this process instead of an LLM; ``llm_cfg`` and ``size`` are unused.
    ``load``: how to get the model (default ``trained.load_trained``; serve keeps it loaded)."""
    from sanctuary_local.stages.verdict.trained import trained_threads

    if load is None:
        from sanctuary_local.stages.verdict.trained import load_trained as load

    threads = trained_threads(verdict_cfg)
    model = st.timed_load(lambda: load(verdict_cfg.trained_model, verdict_cfg.trained_rule, threads))
    for wave in waves(todo, TRAINED_WAVE):
        t = time.perf_counter()
        results = resilient(wave, lambda w: run(model, w), fallback)
        yield wave, results, (time.perf_counter() - t) / len(wave)


def engine_waves(run: RunState) -> Callable[..., Iterator[tuple[list[Any], list[Any], float]]]:
    """``llm_waves`` of the run's engine: in this process (local), or on Ray's actors
    (``RayEngine.llm_waves``, same signature and records)."""
    return run.engine.llm_waves if run.engine is not None else llm_waves


def generate(run: RunState, name: str, sf: StageFile, todo: list[Claim], llm_cfg: Any, size: int, level: int,
             work: Callable[[Any, list[Claim]], list[Any]], fallback: Callable[[Claim, Exception], Any],
             on_wave: Callable[[list[Any]], None] | None = None) -> None:
    """An LLM stage over ``todo``: the model loaded once, wave by wave, each claim's record
    (a result with a ``generation``) appended to ``sf`` as soon as its wave is done."""
    run.stops.check()
    with run.reporter.stage(name, len(todo)) as st:
        stream = engine_waves(run)(st, llm_cfg, run.cfg.models_dir, todo, size, work, fallback)
        with closing(stream):
            for wave, results, per in stream:
                for c, r in zip(wave, results):
                    sf.append(c.index, r, {"seconds": per, "budget_level": level})
                    st.advance(r.generation.prompt_tokens, r.generation.completion_tokens)
                if on_wave is not None:
                    on_wave(results)
                run.stops.check()


def waves(items: list[R], size: int) -> list[list[R]]:
    return [items[i : i + size] for i in range(0, len(items), size)] if items else []


def wave_size(llm_cfg: Any) -> int:
    """Prompts per backend call: vLLM batches everything; CPU backends go claim by claim
    (each finished claim is persisted before the next starts), or with llama.cpp's
    ``parallel`` > 1 two claims per slot (the slots stay busy while the wave's longest
    generations finish, and a wave's records are persisted together)."""
    if llm_cfg.batch_size:
        return int(llm_cfg.batch_size)
    if llm_cfg.backend == "llama_cpp" and llm_cfg.parallel > 1:
        return 2 * int(llm_cfg.parallel)
    return {"vllm": 256, "openai_http": max(1, 2 * int(llm_cfg.concurrency))}.get(llm_cfg.backend, 1)


def resilient(batch: list[Any], run: Callable[[list[Any]], list[R]], fallback: Callable[[Any, Exception], R]) -> list[R]:
    """Run a batch; on an exception (e.g. CUDA OOM) split it in halves and retry, down to
    single items, which then get the fallback record instead of stopping the run."""
    try:
        out = run(batch)
        if len(out) != len(batch):
            raise RuntimeError(f"stage returned {len(out)} results for {len(batch)} inputs")
        return out
    except Exception as exc:  # noqa: BLE001 - isolation boundary
        if len(batch) > 1:
            log.warning("batch of %d failed (%s); retrying in halves", len(batch), exc)
            mid = len(batch) // 2
            return resilient(batch[:mid], run, fallback) + resilient(batch[mid:], run, fallback)
        log.error("item failed: %s", exc)
        return [fallback(batch[0], exc)]
