import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import noise

LIKE = {"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)}
P = 8


def recipes():
    for source in (noise.gaussian(), noise.noise_table(64)):
        for antithetic in (True, False):
            for batch in (None, 3):
                yield noise.Perturbations(source, P, antithetic, batch)


@pytest.mark.parametrize(
    "recipe", list(recipes()), ids=lambda r: f"{r.source.name}-{r.antithetic}-{r.batch_size}"
)
def test_tell_rebuilds_exactly_the_noise_ask_used(recipe):
    key = jax.random.key(3)
    state = recipe.source.init(jax.random.key(0), LIKE)
    # At θ = 0 and σ = 1 each member *is* its signed perturbation, with no rounding.
    population = recipe.population(state, key, LIKE, 1.0)
    one_hot = jnp.eye(P)
    rebuilt = recipe.sums(state, key, LIKE, one_hot)
    for a, b in zip(jax.tree.leaves(rebuilt), jax.tree.leaves(population), strict=True):
        np.testing.assert_array_equal(a, b)
    for i in range(P):
        member = recipe.member(state, key, i, LIKE, 1.0)
        for a, b in zip(jax.tree.leaves(member), jax.tree.leaves(population), strict=True):
            np.testing.assert_array_equal(a, b[i])


def test_antithetic_members_come_in_signed_pairs():
    recipe = noise.Perturbations(noise.gaussian(), P, True)
    pop = recipe.population(None, jax.random.key(1), LIKE, 1.0)
    np.testing.assert_array_equal(pop["w"][0::2], -pop["w"][1::2])
    assert float(jnp.min(jnp.abs(pop["w"][0] - pop["w"][2]))) > 0  # pairs differ


def test_table_windows_are_slices_of_the_table():
    recipe = noise.Perturbations(noise.noise_table(50), 4, True)
    table = recipe.source.init(jax.random.key(0), LIKE)
    flat = np.concatenate(
        [np.ravel(x) for x in jax.tree.leaves(recipe.base(table, jax.random.key(2), 0, LIKE))]
    )
    windows = np.lib.stride_tricks.sliding_window_view(np.asarray(table), flat.size)
    assert np.any(np.all(windows == flat, axis=1))


def test_noise_is_gaussian():
    eps = noise.gaussian().sample(None, jax.random.key(0), jnp.zeros(100_000))
    assert abs(float(jnp.mean(eps))) < 0.02 and abs(float(jnp.std(eps)) - 1) < 0.02


def test_table_smaller_than_params_is_an_error():
    with pytest.raises(ValueError, match=r"noise_table_size.*>= 8"):
        noise.noise_table(7).init(jax.random.key(0), LIKE)
    with pytest.raises(ValueError, match="noise_table_size"):
        noise.noise_table(0)


@pytest.mark.parametrize(
    "params, match",
    [({}, "empty"), ({"a": jnp.arange(3)}, r"\['a'\].*int32"), ([], "empty")],
)
def test_bad_params(params, match):
    with pytest.raises(ValueError, match=match):
        jaxes.open_es(4).init(jax.random.key(0), params)
