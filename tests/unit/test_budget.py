"""The latency-budget knob ladder and planner (pure functions)."""

from sanctuary_local.config.settings import load_config
from sanctuary_local.run.budget import MAX_LEVEL, BudgetPlanner, apply_level, cost_factor, knobs


def test_levels_only_ever_reduce_knobs_in_documented_order() -> None:
    cfg = load_config("paper")
    prev = knobs(cfg)
    for level in range(1, MAX_LEVEL + 1):
        k = knobs(apply_level(cfg, level))
        assert all(k[name] <= prev[name] for name in k), (level, k, prev)
        prev = k
    # the first knob to move is the number of questions, then top-k, then max_tokens
    assert knobs(apply_level(cfg, 1))["hyde.max_questions"] < knobs(cfg)["hyde.max_questions"]
    assert knobs(apply_level(cfg, 1))["retrieval.top_k_segments"] == knobs(cfg)["retrieval.top_k_segments"]
    assert knobs(apply_level(cfg, 2))["retrieval.top_k_segments"] < knobs(cfg)["retrieval.top_k_segments"]
    assert knobs(apply_level(cfg, 2))["verdict.max_tokens"] == knobs(cfg)["verdict.max_tokens"]
    assert knobs(apply_level(cfg, 3))["verdict.max_tokens"] < knobs(cfg)["verdict.max_tokens"]
    assert apply_level(cfg, 0) is cfg and knobs(cfg)["hyde.max_questions"] == 10  # level 0 leaves config alone


def test_cost_factors_decrease_with_level() -> None:
    cfg = load_config("paper")
    for stage in ("hyde", "retrieval", "verdict"):
        costs = [cost_factor(cfg, lv, stage) for lv in range(MAX_LEVEL + 1)]
        assert costs[0] == 1.0 and costs == sorted(costs, reverse=True), (stage, costs)


def test_planner_degrades_only_when_over_budget() -> None:
    cfg = load_config("paper")
    per_claim = {"hyde": 10.0, "retrieval": 5.0, "verdict": 20.0}
    roomy = BudgetPlanner(cfg, budget_s=60.0, n_claims=100)
    assert roomy.choose(140.0, 4, per_claim, ("hyde", "retrieval", "verdict"), 96) == 0
    tight = BudgetPlanner(cfg, budget_s=25.0, n_claims=100)
    level = tight.choose(140.0, 4, per_claim, ("hyde", "retrieval", "verdict"), 96)
    assert 0 < level <= MAX_LEVEL
    assert tight.projected_s is not None and (tight.projected_s <= 25.0 or level == MAX_LEVEL)
    # never goes back down within a run
    assert tight.choose(150.0, 4, {"retrieval": 0.1, "verdict": 0.1}, ("retrieval", "verdict"), 96) >= level
    hopeless = BudgetPlanner(cfg, budget_s=0.001, n_claims=10)
    assert hopeless.choose(100.0, 2, per_claim, ("hyde", "retrieval", "verdict"), 8) == MAX_LEVEL
