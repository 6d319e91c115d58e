"""jaxes.testing passes on correct strategies and catches broken ones."""

import functools

import jax
import jax.numpy as jnp
import pytest

import jaxes
from jaxes import testing

PARAMS = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}


def fitness(p):
    return -jnp.sum(p["w"] ** 2) - jnp.sum((p["b"] - 1.0) ** 2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"noise": jaxes.noise.noise_table(1000), "memory_budget": 3 * 8 * 4},  # 3 at once
        {"antithetic": False, "population_size": 9, "fitness_shaping": "z_score"},
    ],
)
def test_assertions_hold_for_open_es(kwargs):
    es = jaxes.open_es(**{"population_size": 8, "sigma": 0.05, **kwargs})
    key = jax.random.key(0)
    testing.assert_update_matches_classical(es, PARAMS, fitness, key)
    # float32 F + k rounds F at the scale of k: keep k near the fitness spread for z-scores.
    shift = 1.0 if kwargs.get("fitness_shaping") == "z_score" else 123.0
    testing.assert_shift_and_scale_invariant(es, PARAMS, fitness, key, shift=shift)
    testing.assert_members_rebuilt(es, PARAMS, key)
    if es.population_size % 2 == 0:
        testing.assert_antithetic_centroid_on_model(es, PARAMS, fitness, key)


def test_rank_shaping_is_invariant_under_monotone_maps():
    testing.assert_monotone_invariant(jaxes.open_es(8, 0.05), PARAMS, fitness, jax.random.key(0))


def test_raw_shaping_skips_the_scale_check():
    es = jaxes.open_es(8, 0.05, fitness_shaping="raw")
    # Raw weights keep float32's rounding of F + 123 (about 4e-6 each).
    testing.assert_shift_and_scale_invariant(
        es, PARAMS, fitness, jax.random.key(0), scale=None, rtol=5e-5
    )
    with pytest.raises(AssertionError, match="7.0 \\* F"):
        testing.assert_shift_and_scale_invariant(es, PARAMS, fitness, jax.random.key(0), rtol=5e-5)


def broken(es, scale=1.0, key_offset=0):
    """A strategy whose tell is off: a wrong step size or noise from the wrong key."""

    def estimate(state, f):
        direction, stats = es.estimate(
            state.replace(key=jax.random.fold_in(state.key, key_offset)) if key_offset else state,
            f,
        )
        return jax.tree.map(lambda g: scale * g, direction), stats

    def member(state, i):
        return es.member(
            state.replace(key=jax.random.fold_in(state.key, key_offset)) if key_offset else state,
            i,
        )

    return es._replace(estimate=estimate, member=member)


def test_assertions_catch_broken_strategies():
    es = jaxes.open_es(8, 0.05)
    key = jax.random.key(0)
    with pytest.raises(AssertionError, match="classical"):
        testing.assert_update_matches_classical(broken(es, scale=1.01), PARAMS, fitness, key)
    with pytest.raises(AssertionError, match="classical"):
        testing.assert_update_matches_classical(broken(es, key_offset=1), PARAMS, fitness, key)
    with pytest.raises(AssertionError, match="member"):
        testing.assert_members_rebuilt(broken(es, key_offset=1), PARAMS, key)
    # A hand-built strategy (no traits) gets every check, and this one fails it.
    independent = jaxes.open_es(8, 0.05, antithetic=False)._replace(traits=None)
    with pytest.raises(AssertionError, match="centroid"):
        testing.assert_antithetic_centroid_on_model(independent, PARAMS, fitness, key)


# Which check applies to which strategy (the table in jaxes.testing's docstring).
FULL = ("cma_es", "xnes", "cr_fm_nes")  # members m + σ A z on the flattened params
APPLIES = {
    "assert_update_matches_classical": {"open_es"},
    "assert_moments_match_population": {"open_es", "pgpe", "snes", "ars", "sep_cma_es", *FULL},
    "assert_shift_and_scale_invariant": {"open_es", "pgpe", "snes", "ars", "sep_cma_es", *FULL},
    "assert_monotone_invariant": {"open_es", "pgpe", "snes", "sep_cma_es", *FULL},
    "assert_antithetic_centroid_on_model": {"open_es", "pgpe", "ars", "cr_fm_nes"},
}
# Guided ES and the GA (issue 62): every check but OpenAI-ES's identity; the GA has no
# antithetic pairs.
for _check in (
    "assert_moments_match_population",
    "assert_shift_and_scale_invariant",
    "assert_monotone_invariant",
):
    APPLIES[_check] |= {"guided_es", "ga"}
APPLIES["assert_antithetic_centroid_on_model"].add("guided_es")


def quadratic(p):
    return -jnp.sum((p["w"] - 0.5) ** 2)


@pytest.mark.parametrize(
    "name", ["open_es", "pgpe", "snes", "ars", "sep_cma_es", *FULL, "guided_es", "ga"]
)
def test_each_check_holds_where_it_applies_and_refuses_elsewhere(name):
    es = getattr(jaxes, name)(8, 0.05)
    single_leaf = {"w": jnp.ones(3)}  # a one-leaf pytree once slipped past the σ guard
    key = jax.random.key(0)
    testing.assert_members_rebuilt(es, single_leaf, key)
    for check, strategies in APPLIES.items():
        # ars sees fitness values: keep F + shift within float32's precision of the spread.
        extra = {"shift": 1.0} if check == "assert_shift_and_scale_invariant" else {}
        run = functools.partial(getattr(testing, check), es, single_leaf, quadratic, key, **extra)
        if name in strategies:
            run()
        else:
            with pytest.raises(ValueError, match=f"{check} does not apply to {name}"):
                run()
