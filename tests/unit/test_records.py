"""Typed records: dict round trips, deterministic ids, text offsets; light base import."""

from __future__ import annotations

import subprocess
import sys

import orjson

from sanctuary_local.records import (
    LABELS,
    Chunk,
    Claim,
    Document,
    EvidenceItem,
    EvidenceSnippet,
    GoldAnswer,
    GoldQuestion,
    Prediction,
)


def _json_round_trip(record, cls):
    return cls.from_dict(orjson.loads(orjson.dumps(record.to_dict())))


def test_claim_round_trip_and_default_id() -> None:
    c = Claim(
        index=7, text="X said Y.", date="01-02-2020", speaker="X", reporting_source="TV", location="US",
        claim_types=("Quote Verification",), gold_label=LABELS[1],
        gold_questions=(GoldQuestion("Did X say Y?", (GoldAnswer("No", "Boolean", "http://a", "He said Z."),)),),
    )
    assert c.claim_id == "7"
    assert _json_round_trip(c, Claim) == c
    assert c.gold_questions[0].answers[0].scored_text() == "No. He said Z."


def test_document_text_and_ids_are_deterministic() -> None:
    d = Document(claim_index=3, position=5, url="http://u", lines=("a b", "c"))
    assert d.text == "a b\nc"
    assert d.doc_id == Document(3, 5, "http://u", ("other",)).doc_id  # id = claim, position, url
    assert d.doc_id != Document(3, 6, "http://u", ("a b", "c")).doc_id
    assert _json_round_trip(d, Document) == d


def test_chunk_offsets_and_prediction_round_trip() -> None:
    doc = Document(0, 0, "http://u", ("first line", "second line"))
    start = doc.text.index("second")
    chunk = Chunk(0, 0, doc.url, start, len(doc.text), doc.text[start:], n_tokens=2)
    assert doc.text[chunk.start : chunk.end] == chunk.text
    snip = EvidenceSnippet(chunk, 0.5)
    assert EvidenceSnippet.from_dict(orjson.loads(orjson.dumps(snip.to_dict()))) == snip
    p = Prediction(
        claim_index=0, claim_id="0", claim="c", label=LABELS[0],
        evidence=(EvidenceItem("q?", chunk.text, doc.url, "", 0, chunk.start, chunk.end, 0.5),),
        justification="j", provisional_label=LABELS[2], flags=("f",), timings={"hyde": 1.5},
    )
    assert _json_round_trip(p, Prediction) == p


def test_base_import_needs_no_heavy_dependency() -> None:
    """`import sanctuary_local` (and its io and CLI) must work without the cpu/gpu extras:
    the heavy modules are made unimportable in a fresh interpreter."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    HEAVY = {'torch','faiss','llama_cpp','sentence_transformers','transformers','vllm'}\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in self.HEAVY: raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import sanctuary_local, sanctuary_local.io, sanctuary_local.records, sanctuary_local.cli\n"
        "assert sanctuary_local.cli.main(['--version']) == 0\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "sanctuary-local" in res.stdout
