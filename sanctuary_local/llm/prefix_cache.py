"""The KV cache of a prompt's fixed head, kept on disk for llama.cpp (``llm.prefix_cache``).

Every stage-1 prompt starts with the same ~700 tokens (instructions and the one-shot
example, the template before its first placeholder). Evaluating them costs ~10 s of a
2-core machine's time, once per process: the first claim of every ``run``, ``check`` or
``bench`` pays it. The llama.cpp backend evaluates that head on its own, before the
claim's part (always, so the numbers never depend on whether it came from disk), and
this module saves the context's state right then (``llama_state_get_data``: the KV cache
of those tokens, ~28 KiB a token on the 1.5B) and restores it in the next process.

Where: ``$SANCTUARY_CACHE/prefix_kv`` (the packaged models' cache). A file is named by
the SHA-256 of everything that decides its bytes (the model file, llama-cpp-python's
version, the context and batch sizes, the head's tokens), carries the SHA-256 of its
payload and is written atomically: a stale, truncated or tampered file fails the check
before llama.cpp reads it, and the head is evaluated again (and the file rewritten).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from sanctuary_local.io.safe_io import atomic_write_bytes
from sanctuary_local.models.parts import cache_dir

log = logging.getLogger(__name__)

#: A head shorter than this is cheaper to evaluate than to read back.
MIN_PREFIX_TOKENS = 64
_VERSION = 1


def prefix_dir() -> Path:
    """Where prefix states live: ``$SANCTUARY_CACHE/prefix_kv``."""
    return cache_dir() / "prefix_kv"


class PrefixStore:
    """Saves and restores a ``llama_cpp.Llama`` context holding exactly a head's tokens."""

    def __init__(self, model_path: Path, llama_cpp: Any, n_ctx: int, n_batch: int, root: Path | None = None) -> None:
        st = Path(model_path).stat()
        self._identity = {
            "v": _VERSION,
            "model": [str(Path(model_path).resolve()), st.st_size, st.st_mtime_ns],
            "llama_cpp": getattr(llama_cpp, "__version__", "?"),
            "n_ctx": n_ctx,
            "n_batch": n_batch,
        }
        self._lib = llama_cpp
        self.root = root or prefix_dir()

    def path(self, tokens: list[int]) -> Path:
        """The file holding the state after ``tokens`` (one per model, settings and head)."""
        key = json.dumps({**self._identity, "tokens": tokens}, sort_keys=True).encode()
        return self.root / f"{hashlib.sha256(key).hexdigest()[:32]}.kv"

    def load(self, llm: Any, tokens: list[int]) -> bool:
        """Restore the state after ``tokens`` into ``llm``; False (``llm`` untouched) when
        there is no sound file for them."""
        path = self.path(tokens)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("prefix cache: cannot read %s: %s", path, exc)
            return False
        head, _, payload = data.partition(b"\n")
        try:
            meta = json.loads(head)
            sound = (meta.get("n_tokens") == len(tokens) and meta.get("bytes") == len(payload)
                     and meta.get("sha256") == hashlib.sha256(payload).hexdigest())
        except ValueError:
            sound = False
        if not sound:
            log.warning("prefix cache: %s is damaged or stale; evaluating the prompt's head again", path)
            return False
        buf = (ctypes.c_uint8 * len(payload)).from_buffer_copy(payload)
        llm.reset()
        if self._lib.llama_state_set_data(llm._ctx.ctx, buf, len(payload)) != len(payload):
            log.warning("prefix cache: llama.cpp refused %s; evaluating the prompt's head again", path)
            llm.reset()
            return False
        llm.input_ids[: len(tokens)] = tokens
        llm.n_tokens = len(tokens)
        llm._requires_eval = True  # the restored logits are not a live decode's
        return True

    def save(self, llm: Any, tokens: list[int]) -> None:
        """Write ``llm``'s state, which must hold exactly ``tokens``; a failure is logged,
        never raised (the cache only saves time)."""
        try:
            size = self._lib.llama_state_get_size(llm._ctx.ctx)
            buf = (ctypes.c_uint8 * size)()
            n = int(self._lib.llama_state_get_data(llm._ctx.ctx, buf, size))
            payload = ctypes.string_at(buf, n)
            meta = {"n_tokens": len(tokens), "bytes": n, "sha256": hashlib.sha256(payload).hexdigest()}
            atomic_write_bytes(self.path(tokens), json.dumps(meta).encode() + b"\n" + payload)
        except Exception as exc:  # noqa: BLE001 - disk full, read-only cache: the run goes on
            log.warning("prefix cache: could not save a prompt head's state in %s: %s", self.root, exc)


def hold_head(llm: Any, head: list[int], prefixes: PrefixStore | None) -> int:
    """Make ``llm``'s context hold exactly ``head``: kept from the previous request, read
    from disk, or evaluated now (and saved). Returns the tokens of ``head`` not evaluated now."""
    n = len(head)
    if llm.n_tokens >= n and llm._input_ids[:n].tolist() == head:
        llm.n_tokens = n  # drop the previous claim's tokens: generate() cuts the KV cache here
        return n
    if prefixes is not None and prefixes.load(llm, head):
        return n
    llm.reset()
    llm.eval(head)
    if prefixes is not None:
        prefixes.save(llm, head)
    return 0
