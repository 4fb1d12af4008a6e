"""A cross-encoder verdict: a BERT-style encoder fine-tuned on (claim, evidence) pairs.

The encoder reads ``[CLS] claim [SEP] Q: … A: … [SEP]`` (the evidence cut to fit
``max_length``) and a linear head over its pooled output gives the four labels' logits; the
whole network is trained with label-weighted cross-entropy (``TrainSettings.class_weight``),
AdamW and a linear warm-up/decay schedule, on torch's CPU build. Sentence embeddings alone
see a claim's topic, not its stance (a frozen all-MiniLM-L6-v2 with logistic regression did
worse than TF-IDF), hence the fine-tuning.

Weights are saved as fp16 safetensors (half the bytes, read back as fp32), with the
tokenizer files beside them; loading never runs code from the directory.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sanctuary_local.errors import MissingDependency, UserError
from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model.base import Progress, TrainSettings, class_weights
from sanctuary_local.verdict_model.inputs import VerdictInput, render_evidence

#: Claims per forward pass at inference.
BATCH = 16


def _torch() -> Any:
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - the cpu extra installs both
        raise MissingDependency(f"the encoder verdict model needs torch and transformers ({exc}); "
                                "pip install -e '.[cpu]'") from None
    transformers.logging.set_verbosity_error()  # its load report lists the new head as "missing": expected here
    transformers.utils.logging.disable_progress_bar()  # no per-load bar of weights on the run's console
    return torch


def _encode(tokenizer: Any, xs: Sequence[VerdictInput], max_length: int, answer_words: int, focus: bool) -> Any:
    """Claim and evidence as one pair, cut to ``max_length`` tokens by cutting the evidence; a
    batch holding a claim too long to leave room for any evidence cuts claim and evidence alike
    instead (cutting the evidence alone cannot fit it, and the tokenizer would raise)."""
    claims = [" ".join(x.claim.split()) for x in xs]
    how = "only_second"
    if any(len(c) >= max_length - 3 for c in claims):  # a token covers at least one character: count only then
        longest = max(len(ids) for ids in tokenizer(claims, add_special_tokens=False)["input_ids"])
        how = "only_second" if longest < max_length - 3 else "longest_first"
    return tokenizer(claims, [render_evidence(x, answer_words, focus=focus) for x in xs],
                     truncation=how, max_length=max_length, padding=True, return_tensors="pt")


def training_device(name: str) -> Any:
    """The torch device to train on; "cuda" without a CUDA device is a one-line error (the CLI
    asks before it reads any file)."""
    return _device(_torch(), name)


def _device(torch: Any, name: str) -> Any:
    if name == "cpu":
        return torch.device("cpu")
    if name != "cuda":
        raise UserError(f"--device must be 'cpu' or 'cuda' (got '{name}')")
    if not torch.cuda.is_available():
        raise UserError(f"--device cuda: this torch ({torch.__version__}) sees no CUDA device; "
                        "train with --device cpu, or on a GPU box with a CUDA build of torch")
    return torch.device("cuda")


def _device_name(torch: Any, device: Any) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _seed(torch: Any, seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_encoder(xs: Sequence[VerdictInput], s: TrainSettings, base_dir: Path, out: Path,
                  progress: Progress | None = None) -> dict:
    """Fine-tune the encoder in ``base_dir`` on ``xs``; write weights + tokenizer into ``out``."""
    torch = _torch()
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

    torch.set_num_threads(s.threads)
    device = _device(torch, s.device)
    _seed(torch, s.seed)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        base_dir, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)), label2id={v: i for i, v in enumerate(LABELS)},
        torch_dtype=torch.float32).to(device)
    window = getattr(model.config, "max_position_embeddings", None)
    if isinstance(window, int) and s.max_length > window:  # else a torch traceback in the first step
        raise UserError(f"--max-length {s.max_length}: the base encoder {s.base} reads at most {window} tokens")
    y = torch.tensor([LABELS.index(x.label) for x in xs], device=device)
    weights = torch.tensor(class_weights([x.label for x in xs], s.class_weight), dtype=torch.float32, device=device)
    loss_fn = torch.nn.CrossEntropyLoss(weight=weights)
    steps_per_epoch = (len(xs) + s.batch_size - 1) // s.batch_size
    total = steps_per_epoch * s.epochs
    opt = torch.optim.AdamW(model.parameters(), lr=s.learning_rate, weight_decay=0.01)
    sched = get_linear_schedule_with_warmup(opt, int(0.1 * total), total)
    rng, losses, step = np.random.default_rng(s.seed), [], 0
    model.train()
    for _ in range(s.epochs):
        order = rng.permutation(len(xs))
        for b in range(steps_per_epoch):
            idx = order[b * s.batch_size:(b + 1) * s.batch_size]
            batch = _encode(tokenizer, [xs[i] for i in idx], s.max_length, s.answer_words, s.answer_focus).to(device)
            loss = loss_fn(model(**batch).logits, y[torch.as_tensor(idx, device=device)])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            losses.append(float(loss.detach()))
            if progress is not None:
                progress(step, total, losses[-1])
    model.eval()
    model.to("cpu").half().save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    k = max(1, steps_per_epoch // 2)
    return {"steps": total, "loss_first": float(np.mean(losses[:k])), "loss_last": float(np.mean(losses[-k:])),
            "max_length": s.max_length, "device": _device_name(torch, device)}


class EncoderModel:
    """A fine-tuned cross-encoder verdict model read from its directory."""

    kind = "encoder"

    def __init__(self, directory: Path, sha256: str, answer_words: int, max_length: int, threads: int = 2,
                 answer_focus: bool = False) -> None:
        torch = _torch()
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.directory, self.sha256, self.answer_words, self.max_length = directory, sha256, answer_words, max_length
        self.answer_focus = answer_focus
        self._torch = torch
        if threads:
            torch.set_num_threads(threads)
        self._tokenizer = AutoTokenizer.from_pretrained(directory)
        self._model = AutoModelForSequenceClassification.from_pretrained(
            directory, torch_dtype=torch.float32, use_safetensors=True).eval()
        window = getattr(self._model.config, "max_position_embeddings", None)
        if isinstance(window, int) and max_length > window:  # a card edited past the window: a crash per long claim
            raise ValueError(f"its card's max_length {max_length} is past the encoder's {window} positions")

    def predict_proba(self, xs: Sequence[VerdictInput]) -> np.ndarray:
        out = [np.zeros((0, len(LABELS)))]
        with self._torch.inference_mode():
            for i in range(0, len(xs), BATCH):
                batch = _encode(self._tokenizer, xs[i:i + BATCH], self.max_length, self.answer_words, self.answer_focus)
                out.append(self._torch.softmax(self._model(**batch).logits.float(), dim=-1).numpy())
        return np.concatenate(out).astype(np.float64)
