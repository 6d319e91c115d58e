import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxes import shaping


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-10_000, 10_000), min_size=2, max_size=12))
def test_centered_rank_range_sum_and_monotone_invariance(values):
    # Integers keep the maps below strictly increasing after float32 rounding.
    f = jnp.asarray(values, jnp.float32)
    w = shaping.centered_rank(f)
    assert float(jnp.min(w)) >= -0.5 and float(jnp.max(w)) <= 0.5
    assert abs(float(jnp.sum(w))) < 1e-5
    # Strictly increasing maps keep the order, hence the weights.
    # Transforms in float64 numpy: XLA's vectorised float32 exp/arctan may round equal inputs
    # differently (SIMD body vs tail), which would break ties that the map must keep.
    f64 = np.asarray(values, np.float64)
    np.testing.assert_array_equal(
        shaping.centered_rank(jnp.asarray(np.arctan(f64 / 1e3), jnp.float32)), w
    )
    np.testing.assert_array_equal(shaping.centered_rank(3.0 * f + 11.0), w)
    np.testing.assert_array_equal(
        shaping.centered_rank(jnp.asarray(np.exp(f64 / 1e4), jnp.float32)), w
    )


def test_centered_rank_orders_and_ties():
    w = shaping.centered_rank(jnp.array([0.0, 5.0, 5.0, -1.0]))
    np.testing.assert_allclose(w, [-1 / 6, 1 / 3, 1 / 3, -0.5], atol=1e-7)
    np.testing.assert_array_equal(shaping.centered_rank(jnp.full(6, 2.5)), jnp.zeros(6))


@pytest.mark.parametrize("name", sorted(shaping.SHAPINGS))
def test_non_finite_fitness_ranks_worst(name):
    f = jnp.array([1.0, jnp.nan, 3.0, jnp.inf, -jnp.inf, 2.0])
    w = shaping.get_shaping(name)(f)
    assert bool(jnp.all(jnp.isfinite(w)))
    worst = float(jnp.min(w))
    assert all(float(w[i]) == worst for i in (1, 3, 4))
    # Ranks put non-finite values strictly last; raw and z_score give them the worst finite value.
    ranked = name in ("centered_rank", "log_rank")
    assert float(w[0]) > worst if ranked else float(w[0]) == worst
    assert float(w[2]) > float(w[5]) > float(w[0])


@pytest.mark.parametrize("name", sorted(shaping.SHAPINGS))
def test_all_non_finite_gives_equal_weights(name):
    w = shaping.get_shaping(name)(jnp.array([jnp.nan, jnp.inf, jnp.nan, -jnp.inf]))
    assert bool(jnp.all(jnp.isfinite(w))) and float(jnp.ptp(w)) == 0.0


def test_z_score_and_raw():
    f = jnp.array([1.0, 2.0, 3.0, 6.0])
    z = shaping.z_score(f)
    assert abs(float(jnp.mean(z))) < 1e-6 and abs(float(jnp.std(z)) - 1.0) < 1e-5
    np.testing.assert_array_equal(shaping.z_score(jnp.ones(4)), jnp.zeros(4))
    np.testing.assert_array_equal(shaping.raw(f), f)


def test_unknown_shaping_names_allowed():
    with pytest.raises(ValueError, match="fitness_shaping.*centered_rank"):
        shaping.get_shaping("rank")


def _tie_span_by_two_sums(f):
    below = np.sum(f[None, :] < f[:, None], axis=1)
    return below, below + np.sum(f[None, :] == f[:, None], axis=1) - 1


@pytest.mark.parametrize("p", [2, 17, 200, 1024])
def test_tie_span_counts_match_two_sums(p):
    # Up to the largest P the counts serve, in one reduction (2, 17, 1024) and, on the CPU, in
    # blocks of columns with a padded last block (200); all members tied is the largest
    # "equal" count. Batched (vmap), one reduction over the batch gives the same counts.
    rng = np.random.default_rng(p)
    for f in (rng.integers(0, 5, p).astype(np.float32), np.zeros(p, np.float32)):
        low, high = shaping._tie_span(jnp.asarray(f))
        want_low, want_high = _tie_span_by_two_sums(f)
        np.testing.assert_array_equal(low, want_low)
        np.testing.assert_array_equal(high, want_high)
        batched = jax.vmap(shaping._tie_span)(jnp.stack([f, -f]))
        np.testing.assert_array_equal(batched[0][0], want_low)
        np.testing.assert_array_equal(batched[1][1], _tie_span_by_two_sums(-f)[1])


@pytest.mark.parametrize("p, blocked", [(128, False), (256, True), (384, True), (512, False)])
def test_only_the_band_xla_cpu_would_split_counts_in_blocks(p, blocked):
    # 128 < P <= 384: one pass over the P² pairs is split across threads by XLA:CPU for less
    # work than the split costs, so the CPU program counts in a loop over blocks; any other P,
    # another backend, or a batch of populations (vmap), in one reduction.
    f = jnp.zeros(p, jnp.float32)
    cpu = jax.jit(shaping._tie_span).trace(f).lower(lowering_platforms=("cpu",)).as_text()
    gpu = jax.jit(shaping._tie_span).trace(f).lower(lowering_platforms=("cuda",)).as_text()
    batch = jax.jit(jax.vmap(shaping._tie_span)).lower(jnp.zeros((2, p))).as_text()
    assert ("stablehlo.while" in cpu) == blocked
    assert "stablehlo.while" not in gpu and "stablehlo.while" not in batch


@pytest.mark.parametrize("name", ["log_rank", "cma"])
def test_per_rank_tables_are_program_constants(name):
    # Tables that depend on P alone enter the program as constants: no log or cumulative sum
    # runs per call. Values: the float64 formula, rounded once.
    fitness = jnp.array([0.0, 3.0, 1.0, 2.0, 3.0, -1.0])
    fn = shaping.log_rank_utilities if name == "log_rank" else shaping.recombination_weights(3)
    text = jax.jit(fn).lower(fitness).as_text()
    assert "stablehlo.log" not in text and "reduce_window" not in text
    k = np.arange(1.0, 7.0)
    if name == "log_rank":
        raw = np.maximum(0.0, np.log(4.0) - np.log(k))
        per_rank = raw / raw.sum() - 1 / 6
    else:
        raw = np.where(k <= 3, np.log(3.5) - np.log(k), 0.0)
        per_rank = raw / raw.sum()
    # Best first: members 1 and 4 tie for ranks 0-1, then 3, 2, 0, 5.
    want = np.array(
        [per_rank[4], (per_rank[0] + per_rank[1]) / 2, per_rank[3], per_rank[2], 0, per_rank[5]]
    )
    want[4] = want[1]
    np.testing.assert_allclose(fn(fitness), want, rtol=1e-6, atol=1e-7)


def test_traced_per_rank_table_still_works():
    per_rank = jnp.array([0.75, 0.25, 0.0, -0.5])
    fitness = jnp.array([1.0, 4.0, 2.0, 2.0])
    traced = jax.jit(lambda w, f: shaping.rank_weights(w)(f))(per_rank, fitness)
    np.testing.assert_array_equal(traced, shaping.rank_weights(per_rank)(fitness))


def _des_by_formula(fitness: np.ndarray, temperature: float) -> np.ndarray:
    """evosax's DES weights written out: softmax(-20 sigmoid(T c_k)) over best-first ranks k,
    minus 1/P; a tie group shares the mean of its ranks' weights, NaN ranks last."""
    p = len(fitness)
    c = np.arange(p) / (p - 1) - 0.5
    e = np.exp(-20.0 / (1.0 + np.exp(-temperature * c)))
    per_rank = e / e.sum() - 1.0 / p
    f = np.where(np.isnan(fitness), -np.inf, fitness)
    return np.array([per_rank[np.sum(f > x) : p - np.sum(f < x)].mean() for x in f])


@pytest.mark.parametrize("temperature", [0.5, 12.5, 30.0])
def test_des_weights_equal_evosaxs_formula_with_ties_sharing_their_mean(temperature):
    fitness = np.array([0.0, 3.0, 1.0, 2.0, 3.0, -1.0, np.nan, 1.0], np.float32)
    weights = shaping.des_weights(temperature)(jnp.asarray(fitness))
    np.testing.assert_allclose(weights, _des_by_formula(fitness, temperature), atol=1e-7)
    assert abs(float(jnp.sum(weights))) < 1e-6
    # A concrete temperature's table is a constant of the program; a traced one is computed.
    text = jax.jit(shaping.des_weights(temperature)).lower(jnp.asarray(fitness)).as_text()
    assert "exponential" not in text and "tanh" not in text
    traced = jax.jit(lambda t, f: shaping.des_weights(t)(f))(temperature, jnp.asarray(fitness))
    np.testing.assert_allclose(traced, weights, atol=1e-6)


@pytest.mark.parametrize("temperature", [0, -1.0, float("nan"), "30", None])
def test_des_weights_refuse_a_temperature_that_is_not_a_positive_number(temperature):
    with pytest.raises(ValueError, match=r"^temperature: expected a finite number > 0, got "):
        shaping.des_weights(temperature)


def test_des_weights_are_evosaxs_discovered_weights_centred():
    """The same weights as evosax's own (its DES's ``get_weights``, which its SNES with a
    temperature used), where the ``bench`` extra installs evosax."""
    discovered = pytest.importorskip("evosax.algorithms.distribution_based.discovered_es")
    for p, temperature in [(8, 30.0), (13, 12.5)]:
        best_first = jnp.arange(p, 0, -1.0)
        want = np.asarray(discovered.get_weights(p, temperature), np.float64) - 1.0 / p
        np.testing.assert_allclose(shaping.des_weights(temperature)(best_first), want, atol=1e-6)
