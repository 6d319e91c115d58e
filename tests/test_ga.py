"""The seed-encoded GA (Such et al. 2017, issue 62): each child is a parent plus one mutation
drawn from the ask key and its index, the elite is kept unmutated, selection keeps the best
T by rank, and ``jaxes train`` builds it (it has no step size)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxes
from jaxes.app import build as build_lib
from jaxes.app.checks import ConfigError
from jaxes.app.config import TrainConfig

PARAMS = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.full(4, 0.5)}


def fitness_fn(x):
    return -jnp.sum(jnp.square(x["w"] - 0.3)) - jnp.sum(jnp.square(x["b"] + 1.0))


def row(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def evolved(es, generations=3):
    state = es.init(jax.random.key(0), PARAMS)
    for g in range(generations):
        population, state = es.ask(jax.random.key(10 + g), state)
        state, _ = es.tell(state, jax.vmap(fitness_fn)(population))
    return state


def test_each_child_is_a_parent_plus_one_mutation_from_the_key_and_the_elite_is_theta():
    es = jaxes.ga(12, 0.2, truncation=3, noise="gaussian")
    state = evolved(es)
    population, state = es.ask(jax.random.key(99), state)
    parents = [row(state.parents, t) for t in range(3)]
    assert len({tuple(np.asarray(p["b"]).tolist()) for p in parents}) == 3  # distinct parents
    for a, b in zip(
        jax.tree.leaves(row(population, 0)), jax.tree.leaves(state.params), strict=True
    ):
        np.testing.assert_array_equal(a, b)  # member 0: the elite, unmutated
    perturbations = jaxes.noise.Perturbations(jaxes.noise.gaussian(), 12, antithetic=False)
    for i in range(1, 12):
        eps = perturbations.base(None, state.key, i, PARAMS)
        candidates = [jax.tree.map(lambda x, e: x + 0.2 * e, p, eps) for p in parents]
        matches = [
            all(
                np.array_equal(a, b)
                for a, b in zip(
                    jax.tree.leaves(c), jax.tree.leaves(row(population, i)), strict=True
                )
            )
            for c in candidates
        ]
        assert any(matches), i  # one parent plus σ ε_i, bit for bit


def test_the_elite_survives_worse_children_and_nan_ranks_worst():
    es = jaxes.ga(8, 0.3, truncation=2)
    state = evolved(es)
    population, asked = es.ask(jax.random.key(7), state)
    fitness = jnp.full(8, -1.0).at[0].set(5.0).at[3].set(jnp.nan).at[5].set(2.0)
    told, info = es.tell(asked, fitness)
    np.testing.assert_array_equal(told.params["w"], state.params["w"])  # the elite stays
    assert float(info.update_norm) == 0.0 and bool(info.applied)
    np.testing.assert_array_equal(told.parents["b"][1], population["b"][5])  # then the next best
    told, _ = es.tell(asked, fitness.at[6].set(9.0))  # a better child takes its place
    np.testing.assert_array_equal(told.params["b"], population["b"][6])
    np.testing.assert_array_equal(told.parents["b"][1], population["b"][0])


def test_truncation_is_a_share_of_the_population_with_elite_ratio():
    assert jaxes.ga(64).init(jax.random.key(0), PARAMS).parents["b"].shape == (8, 4)  # P // 8
    assert (
        jaxes.ga(64, elite_ratio=0.25).init(jax.random.key(0), PARAMS).parents["b"].shape[0] == 16
    )


def test_it_solves_a_quadratic_with_a_sigma_schedule():
    es = jaxes.ga(32, optax.exponential_decay(0.3, 1, 0.99), truncation=4)
    state = es.init(jax.random.key(0), PARAMS)

    def generation(state, key):
        population, state = es.ask(key, state)
        return es.tell(state, jax.vmap(fitness_fn)(population))

    state, infos = jax.jit(lambda s: jax.lax.scan(generation, s, jax.random.split(s.key, 150)))(
        state
    )
    assert float(fitness_fn(state.params)) > 0.05 * float(fitness_fn(PARAMS))
    assert np.all(np.diff(np.asarray(infos.best_fitness)) >= 0)
    np.testing.assert_allclose(infos.sigma[-1], 0.3 * 0.99**149, rtol=1e-5)


def test_jaxes_train_builds_it_without_a_learning_rate():
    config = TrainConfig.make(env="fast", strategy="ga", elite_ratio=0.25, sigma_decay=0.99)
    assert config.strategy.learning_rate is None
    assert TrainConfig.from_dict(config.to_dict()) == config  # config.json round trip
    strategy = build_lib._strategy(config.strategy)
    state = strategy.init(jax.random.key(0), jnp.zeros(3))
    assert (
        strategy.traits.name == "ga"
        and state.parents.shape[0] == config.strategy.population_size // 4
    )
    with pytest.raises(ConfigError) as caught:
        TrainConfig.make(env="fast", strategy="ga", learning_rate=0.1)
    assert str(caught.value).startswith("learning_rate: ga has no learning_rate setting")
    with pytest.raises(ConfigError, match="^ga: noise: ga mutates every parameter densely"):
        build_lib.build(TrainConfig.make(env="fast", strategy="ga", noise="lowrank"))
