"""The seeded ES-vs-GRPO study's wiring (benchmarks/countdown_seeds.py, issue 42): Qiu's update
rule as the methods run it, budgets turned into updates, the choice made on training problems,
and the report's schema and intervals. Nothing is fine-tuned here."""

import doctest
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the script imports `_common` as a sibling

import countdown_seeds as cs  # noqa: E402

from jaxes_examples.countdown import finetune  # noqa: E402


def test_the_scripts_examples_hold():
    assert doctest.testmod(cs).failed == 0


def test_qiu_method_steps_alpha_times_the_mean_of_z_scored_rewards_times_noise():
    """θ' = θ + α (1/P) Σ zᵢ εᵢ (Qiu et al. 2025), with α = 5e-4 as the method sets it."""
    study, _ = cs._methods()
    qiu = study["ES Qiu"]
    method = finetune.Method(**{**qiu.__dict__, "dtype": "float32"})  # the rule, not rounding
    es = finetune.make_strategy(method)
    theta = {"w": jnp.linspace(-1.0, 1.0, 12)}
    state = es.init(jax.random.key(0), theta)
    population, state = es.ask(jax.random.key(1), state)
    fitness = jax.random.uniform(jax.random.key(2), (method.population,))
    new, _ = es.tell(state, fitness)
    eps = (population["w"] - theta["w"]) / method.sigma
    z = (fitness - fitness.mean()) / fitness.std()
    expected = theta["w"] + 5e-4 * jnp.mean(z[:, None] * eps, axis=0)
    np.testing.assert_allclose(new.params["w"], expected, rtol=1e-4, atol=1e-9)


def test_budgets_buy_whole_blocks_of_updates():
    study, candidates = cs._methods()
    qiu, grpo = study["ES Qiu"], candidates["GRPO tuned"][0]
    assert cs.tokens_per_update(qiu) == 30 * 64 * 6  # members x prompts x answer tokens
    assert cs.tokens_per_update(grpo) == 16 * 8 * 6  # prompts x group x answer tokens
    runs = [{"phase": "time", "model": "small", "method": qiu.name, "train_seconds": 10.0,
             "updates": 100}]  # fmt: skip
    assert cs.budget_updates(qiu, runs, "small", "wall", 60.0) == 600
    assert cs.budget_updates(qiu, runs, "small", "tokens", 1e6) == 17 * qiu.eval_every
    with pytest.raises(SystemExit, match="run `time` first"):
        cs.budget_updates(grpo, runs, "small", "wall", 60.0)


def test_the_tuned_method_is_chosen_on_training_problems():
    _, candidates = cs._methods()
    runs = [
        {"phase": "tune", "model": "small", "method": m.name, "train_accuracy": 0.1 * i,
         "accuracy": 1.0 - 0.1 * i}  # held-out accuracy must not decide
        for group in candidates.values() for i, m in enumerate(group)
    ]  # fmt: skip
    chosen = cs.tuned(runs, candidates)
    assert chosen["ES best (as)"].name == candidates["ES best"][-1].name
    assert chosen["GRPO tuned"].learning_rate == candidates["GRPO tuned"][-1].learning_rate
    with pytest.raises(SystemExit, match="tune first"):
        cs.tuned(runs[1:], candidates)


def test_the_report_has_the_issues_schema_and_intervals(tmp_path):
    rows = []
    for seed, correct in zip([1, 2, 3], [100, 120, 140], strict=True):
        rows.append({
            "phase": "run", "model": "small", "method": "GRPO tuned", "seed": seed,
            "budget": "wall", "budget_amount": 60.0, "updates": 10, "sampled_tokens": 7680,
            "train_seconds": 1.0, "accuracy": correct / 2000, "correct": correct,
            "test_problems": 2000, "start_accuracy": 0.05, "settings": {}, "cpu": "x",
            "commit": "c",
        })  # fmt: skip
    methods = cs.report(rows)
    got = methods["GRPO tuned | small | wall"]
    assert got["seeds"] == [1, 2, 3] and got["accuracy"] == [0.05, 0.06, 0.07]
    assert got["mean"] == pytest.approx(0.06) and got["sd"] == pytest.approx(0.01)
    half = 4.303 * 0.01 / 3**0.5  # t(0.975, 2 df) x sd / sqrt(n)
    assert got["interval"] == pytest.approx([0.06 - half, 0.06 + half])
    lo, hi = got["pooled_wilson"]
    assert lo < 360 / 6000 < hi
    assert "| GRPO tuned | small | wall | 10 |" in cs.markdown(methods)


def test_rankings_tell_apart_only_what_the_seeds_separate():
    methods = {
        "GRPO tuned | small | wall": {"accuracy": [0.30, 0.31, 0.29, 0.30, 0.32]},
        "ES best | small | wall": {"accuracy": [0.10, 0.12, 0.11, 0.09, 0.10]},
        "ES Qiu | small | wall": {"accuracy": [0.05, 0.40, 0.20, 0.33, 0.28]},
    }
    got = cs.rankings(methods)["small | wall"]
    assert got["best"] == "GRPO tuned"
    assert got["against"]["ES best"]["told_apart"]  # a gap of 0.2 against sds of 0.01
    assert not got["against"]["ES Qiu"]["told_apart"]  # a mean 0.05 lower, an sd of 0.14
    d = got["against"]["ES best"]
    assert d["difference"] == pytest.approx(0.20) and d["interval"][0] < 0.20 < d["interval"][1]


def test_welch_reads_the_t_table_at_the_welch_satterthwaite_degrees_of_freedom():
    # Unequal spreads and unequal seeds: 3 wide against 7 narrow. scipy's Welch test gives
    # 2.03 degrees of freedom (the pooled count would be 8, with t = 2.306 for 4.303).
    wide, narrow = [0.20, 0.40, 0.30], [0.10, 0.11, 0.09, 0.10, 0.12, 0.08, 0.10]
    d = cs.welch(wide, narrow)
    ref = scipy.stats.ttest_ind(wide, narrow, equal_var=False)
    se = d["difference"] / ref.statistic
    assert ref.df == pytest.approx(2.029, abs=1e-3)
    # welch takes the t quantile at the floor of the degrees of freedom: a little wider than
    # scipy's interval, which holds it.
    half = scipy.stats.t.ppf(0.975, math.floor(ref.df)) * se
    assert d["difference"] == pytest.approx(0.2)
    assert d["interval"] == pytest.approx([0.2 - half, 0.2 + half], rel=1e-3)
    low, high = ref.confidence_interval(0.95)
    assert d["interval"][0] < low < 0 < high < d["interval"][1]
    # So a gap of 0.2 is not told apart (the pooled count would: 0.066 to 0.334).
    methods = {"GRPO tuned | small | wall": {"accuracy": wide},
               "ES best | small | wall": {"accuracy": narrow}}  # fmt: skip
    got = cs.rankings(methods)["small | wall"]
    assert got["best"] == "GRPO tuned" and not got["against"]["ES best"]["told_apart"]


def test_the_fixed_answer_floor_is_what_the_reward_gives_that_answer_everywhere():
    from jaxes_examples.countdown import problems

    floor = cs.fixed_answer()
    train, test = problems.split(0, numbers=3, test_size=problems.TEST_PROBLEMS)
    best, shape = problems.fixed_answer_accuracy(test)
    _, train_shape = problems.fixed_answer_accuracy(train)
    names = {op: name for name, op in problems.OPS.items()}
    for key, (order, ops) in (("accuracy", shape), ("train_answer_accuracy", train_shape)):
        answers = np.stack([
            problems.encode_answer(row[order[0]], *(t for op, i in zip(ops, order[1:], strict=True)
                                                    for t in (names[op], row[i])))
            for row in test
        ])  # fmt: skip
        scored = problems.reward(problems.prompts_of(test), jnp.asarray(answers))
        assert float(scored.mean()) == pytest.approx(floor[key])
    assert floor["answer"] == problems.shape_text(*shape) and floor["accuracy"] == best
    assert floor["accuracy"] >= floor["train_answer_accuracy"] > 0
