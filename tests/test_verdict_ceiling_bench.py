"""benchmarks/verdict_ceiling.py: the oracle reading keeps exactly the snippet sentences that hold a
gold answer sentence, and drops the pairs that hold none."""

from __future__ import annotations

from sanctuary_local.verdict_model.inputs import QAPair, VerdictInput, _content_words


def test_gold_only_keeps_the_sentences_holding_a_gold_sentence(load_benchmark) -> None:
    bench = load_benchmark("verdict_ceiling")
    gold = [_content_words("The bridge opened to traffic in 1937 after four years of work.")]
    text = ("Filler about weather in Lisbon today. The bridge opened to traffic in 1937, after four years of work. "
            "Another sentence about football results.")
    assert bench.gold_only(text, gold) == "The bridge opened to traffic in 1937, after four years of work."
    assert bench.gold_only("Nothing relevant here at all. Nor here.", gold) == ""


def test_oracle_drops_pairs_without_gold_and_keeps_order(load_benchmark) -> None:
    bench = load_benchmark("verdict_ceiling")
    gold = [_content_words("Senator Smith voted against the budget bill in March.")]
    x = VerdictInput("claim", (QAPair("q1", "Unrelated filler sentence about cats and dogs."),
                               QAPair("q2", "Records show Senator Smith voted against the budget bill in March. More."),
                               QAPair("q3", "")), "Refuted")
    got = bench.oracle(x, gold)
    assert [p.question for p in got.pairs] == ["q2"]
    assert got.pairs[0].answer == "Records show Senator Smith voted against the budget bill in March."
    assert got.claim == "claim" and got.label == "Refuted"

