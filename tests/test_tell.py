"""What every ``tell`` reads off the fitness (``strategies._tell.fitness_summary``): the same
numbers as the plain reductions it replaces, from one variadic reduction; and how a donated
``tell`` writes its state back."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes.strategies._tell import fitness_summary

NAN, INF = float("nan"), float("inf")
CASES = [
    [1.0, 3.0, -2.0, 3.0],  # a tie at the top: the first is the best member
    [NAN, 2.0, INF, -INF, 0.5, NAN],  # non-finite values are left out
    [NAN, INF, -INF],  # none finite
    [4.0, 4.0, 4.0],  # finite but carrying no ranking
    list(np.random.default_rng(0).normal(size=64)),  # past XLA's split of long reductions
]


def _reference(values):
    f = np.asarray(values, np.float64)
    finite = np.isfinite(f)
    if not finite.any():
        return 0, NAN, NAN, NAN, 0
    ranked = np.where(finite, f, -np.inf)
    kept = f[finite]
    return finite.sum(), kept.mean(), kept.max(), kept.min(), int(np.argmax(ranked))


@pytest.mark.parametrize("values", CASES)
def test_fitness_summary_matches_plain_reductions(values):
    s = jax.jit(fitness_summary)(jnp.asarray(values, jnp.float32))
    count, mean, high, low, best = _reference(values)
    assert int(s.count) == count and int(s.best_index) == best
    np.testing.assert_allclose([s.mean, s.max, s.min], [mean, high, low], rtol=1e-6)
    assert bool(s.informative) == (count > 0 and high > low)
    assert s.count.dtype == jnp.int32 and s.max.dtype == jnp.float32


def test_fitness_summary_is_one_reduction_besides_the_sum():
    text = jax.jit(fitness_summary).lower(jnp.zeros(8)).as_text()
    assert text.count("stablehlo.reduce(") == 2


@pytest.mark.parametrize("pending", [True, False])
def test_the_pending_flag_comes_back_from_the_same_reduction(pending):
    s = jax.jit(fitness_summary)(jnp.asarray(CASES[0], jnp.float32), jnp.asarray(pending))
    assert bool(s.pending) is pending
    text = jax.jit(fitness_summary).lower(jnp.zeros(8), jnp.ones((), bool)).as_text()
    assert text.count("stablehlo.reduce(") == 2


# A donated tell writes each field back into its own buffer; the fields the best-member
# recipe and the info also read are written after them (ordering.after) instead of being
# copied first. Held for these (at d = 10, P = 16, float32; other fields of some strategies
# are still copied: the strategy's own update reads them in several kernels).
NOT_COPIED = {
    "open_es": (
        *("state.pending", "state.best_fitness", "state.fitness", "state.generation"),
        *(f"state.opt_state[0].{name}" for name in ("mu", "nu", "count")),
    ),
    "snes": ("state.params", "state.pending", "state.best_fitness", "state.fitness"),
    "sep_cma_es": ("state.params", "state.pending", "state.best_fitness", "state.fitness"),
}


@pytest.mark.parametrize("name", sorted(NOT_COPIED))
def test_a_donated_small_tell_copies_none_of_the_fields_it_orders(name):
    es = getattr(jaxes, name)(16, sigma=0.05)
    state = jax.eval_shape(lambda: es.init(jax.random.key(0), jnp.ones(10, jnp.float32)))
    fitness = jax.ShapeDtypeStruct((16,), jnp.float32)
    text = jax.jit(es.tell, donate_argnums=0).lower(state, fitness).compile().as_text()
    entry = text[text.index("ENTRY") :]
    named = r"%(\S+) = \S+ parameter\(\d+\), metadata=\{op_name=\"([^\"]+)\""
    params = dict(re.findall(named, entry))
    copied = {params.get(src) for src in re.findall(r"= \S+ copy\(%([^)]+)\)", entry)}
    assert not copied & set(NOT_COPIED[name]), copied
