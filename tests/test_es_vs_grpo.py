"""The ES-against-GRPO study's wiring (benchmarks/es_vs_grpo.py and
jaxes_examples.lm_countdown.study, issue 61): phases refuse to run out of order in one line,
the statistics (Welch, TOST), the budgets' measurement points, Qiu et al.'s update as the arm
runs it, the problem sets' disjointness and the floor. Nothing is fine-tuned here."""

import doctest
import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the script imports `_common` as a sibling

import es_vs_grpo as study_script  # noqa: E402

from jaxes_examples.lm_countdown import bases, study  # noqa: E402


def test_the_examples_hold():
    for module in (study_script, study, bases):
        assert doctest.testmod(module).failed == 0, module.__name__


def _phase(tmp_path, *args):
    runs = tmp_path / "runs.jsonl"
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / "es_vs_grpo.py"), *args, "--runs", str(runs)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "phase, records, says",
    [
        ("tune", [], "base 'seed0' is not built: run `python benchmarks/es_vs_grpo.py bases"),
        ("run", [], "base 'seed0' is not built: run `python benchmarks/es_vs_grpo.py bases"),
        ("run", [{"phase": "bases", "base": "seed0"}], "run `python benchmarks/es_vs_grpo.py tune"),
        ("report", [], "run `python benchmarks/es_vs_grpo.py bases` first"),
        ("report", [{"phase": "bases", "base": "seed0"}], "es_vs_grpo.py run --base seed0` first"),
    ],
)
def test_a_phase_run_out_of_order_names_the_one_to_run_first_in_one_line(
    tmp_path, phase, records, says
):
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    proc = _phase(tmp_path, phase)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr


def test_welch_and_tost_against_scipy():
    rng = np.random.default_rng(0)
    a, b = list(rng.normal(0.30, 0.02, 5)), list(rng.normal(0.25, 0.05, 5))
    got = study_script.welch_tost(a, b, 0.02)
    ref = scipy.stats.ttest_ind(a, b, equal_var=False)
    low, high = ref.confidence_interval(0.95)
    np.testing.assert_allclose(got["interval"], [low, high], rtol=1e-9)
    low90, high90 = ref.confidence_interval(0.90)
    np.testing.assert_allclose(got["interval90"], [low90, high90], rtol=1e-9)
    # TOST: equivalent only when the 90 % interval is inside ±margin.
    near = [0.300, 0.301, 0.302, 0.299, 0.300]
    assert study_script.welch_tost(near, [x + 0.001 for x in near], 0.02)["equivalent"]
    assert not study_script.welch_tost(near, [x + 0.015 for x in a], 0.02)["equivalent"]
    assert not study_script.welch_tost(a, b, 0.001)["equivalent"]


def test_the_tracker_measures_at_the_points_the_token_budget_and_the_wall_budget(monkeypatch):
    calls = []

    def fake(pre, params, problems):
        calls.append(params)
        return {"accuracy": float(params), "reward": 0.0, "texts": ["x"]}

    monkeypatch.setattr(study, "held_out_accuracy", fake)
    tracker = study.Tracker(None, study.Budget(updates=4, seconds=10.0, points=2), 100, [])
    clock = [3.0, 6.0, 9.0, 12.0, 15.0, 18.0]  # the wall budget passes at update 4
    updates = 0
    while not tracker.done(updates, clock[updates - 1] if updates else 0.0):
        updates += 1
        tracker.after(updates, clock[updates - 1], lambda u=updates: u)
    assert updates == 4
    assert [(p["updates"], p["marks"]) for p in tracker.curve] == [
        (2, ["point"]),
        (4, ["tokens", "wall"]),
    ]
    assert tracker.curve[-1]["tokens"] == 400
    # A run that spends its tokens before the wall budget trains on, and is measured where
    # the wall budget ends.
    tracker = study.Tracker(None, study.Budget(updates=2, seconds=10.0, points=1), 100, [])
    updates = 0
    while not tracker.done(updates, 4.0 * updates):
        updates += 1
        tracker.after(updates, 4.0 * updates, updates)
    assert [(p["updates"], p["marks"]) for p in tracker.curve] == [(2, ["tokens"]), (3, ["wall"])]
    assert study_script.at_budget({"curve": tracker.curve}, "wall")["updates"] == 3


def test_qiu_arm_steps_alpha_times_the_mean_of_z_scored_rewards_times_noise():
    """θ' = θ + α (1/P) Σ zᵢ εᵢ (Qiu et al. 2025), α = 5e-4, full-rank, no antithetic pairs."""
    fixed, _ = study_script._arms()
    arm = fixed["ES (Qiu et al.)"]
    assert (arm.population, arm.sigma, arm.rank, arm.batch) == (30, 1e-3, 0, 200)
    es = arm.strategy()
    theta = {"w": jnp.linspace(-1.0, 1.0, 12)}
    state = es.init(jax.random.key(0), theta)
    population, state = es.ask(jax.random.key(1), state)
    fitness = jax.random.uniform(jax.random.key(2), (arm.population,))
    new, _ = es.tell(state, fitness)
    eps = (population["w"] - theta["w"]) / arm.sigma
    z = (fitness - fitness.mean()) / fitness.std()
    expected = theta["w"] + 5e-4 * jnp.mean(z[:, None] * eps, axis=0)
    np.testing.assert_allclose(jaxes_centre(new), expected, rtol=2e-4, atol=1e-9)
    assert not np.allclose(eps[0], -eps[1])  # independent members


def jaxes_centre(state):
    import jaxes

    return jaxes.centre(state)["w"]


def test_tokens_per_update_count_every_decoded_answer_token():
    fixed, candidates = study_script._arms()
    assert study_script._tokens_per_update(fixed["ES (Qiu et al.)"]) == 30 * 200 * 32
    assert study_script._tokens_per_update(fixed["ES (EGGROLL)"]) == 1024 * 8 * 32
    grpo = candidates["GRPO tuned"][0]
    assert study_script._tokens_per_update(grpo) == grpo.batch * grpo.group * 32
    assert len(candidates["ES tuned"]) == len(candidates["GRPO tuned"])  # equal effort


def test_the_problem_sets_are_disjoint_and_the_floor_is_a_fixed_shape():
    sets = study.problem_sets()
    assert len(sets["test"]) + len(sets["dropped"]) == study.TEST
    keys = {name: {study.countdown.key(p) for p in sets[name]} for name in sets}
    assert not keys["test"] & keys["training"] and not keys["test"] & keys["validation"]
    assert not keys["training"] & keys["validation"]
    shapes = study.fixed_answer_shapes(sets["training"][:2000])
    floor = study.fixed_answer_rate(sets["test"], shapes)
    assert floor > 0.0
    # No other fixed shape of three numbers beats the chosen one on the problems it was
    # chosen on.
    three = [p for p in sets["training"][:2000] if len(p["numbers"]) == 3]
    best = study.fixed_answer_rate(three, shapes)
    for order, ops, _ in study.countdown._values([1, 2, 3]):
        assert study.fixed_answer_rate(three, {3: (order, ops)}) <= best
