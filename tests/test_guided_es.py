"""Guided ES (issue 62): its members are the paper's, ``guide`` keeps the basis of the last k
surrogate gradients, the estimate is the paper's, and with a biased surrogate gradient it
reaches a target in fewer evaluations than OpenAI-ES (the measurement over seeds:
benchmarks/guided_es.py, docs/benchmarks.md)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_states_identical

import jaxes
from jaxes.app import build as build_lib
from jaxes.app import cli, train
from jaxes.app.config import TrainConfig
from jaxes.strategies.guided_es import orthonormal
from jaxes.strategies.samplers import standard_normal

PARAMS = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.full(4, 0.5)}
D = 10


def flat(tree):
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(tree)])


def gradient(seed):
    return jax.tree.map(lambda x: jax.random.normal(jax.random.key(seed), x.shape), PARAMS)


def test_members_are_theta_plus_the_papers_perturbation_drawn_from_the_key():
    alpha, sigma, k = 0.3, 0.7, 2
    es = jaxes.guided_es(8, sigma, alpha=alpha, subspace_dims=k)
    state = es.init(jax.random.key(0), PARAMS)
    for seed in (1, 2, 3):  # three given, the last two kept
        state = jaxes.guide(state, gradient(seed))
    population, state = es.ask(jax.random.key(4), state)
    u = np.asarray(state.basis, np.float64)
    np.testing.assert_allclose(u.T @ u, np.eye(k), atol=1e-6)
    spanned = np.stack([flat(gradient(3)), flat(gradient(2))], axis=1)
    np.testing.assert_allclose(u @ (u.T @ spanned), spanned, atol=1e-5)  # the newest two
    theta = flat(state.params)
    for i in range(8):
        z = np.asarray(standard_normal(state.key, i // 2, D + k, jnp.float32), np.float64)
        eps = sigma * (math.sqrt(alpha / D) * z[:D] + math.sqrt((1 - alpha) / k) * u @ z[D:])
        expected = theta + (1 if i % 2 == 0 else -1) * eps
        got = flat(jax.tree.map(lambda x, i=i: x[i], population))
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_the_covariance_is_sigma_squared_times_the_papers():
    """``E[ε εᵀ] = σ² ((α/d) I + ((1-α)/k) U Uᵀ)``, from 20,000 pairs (d = 10, k = 1)."""
    alpha, sigma, pairs = 0.5, 2.0, 20_000
    es = jaxes.guided_es(2 * pairs, sigma, alpha=alpha)
    state = jaxes.guide(es.init(jax.random.key(0), jnp.zeros(D)), jnp.arange(1.0, D + 1))
    population, _ = jax.jit(es.ask)(jax.random.key(1), state)
    eps = np.asarray(population[0::2], np.float64)
    u = np.arange(1.0, D + 1) / np.linalg.norm(np.arange(1.0, D + 1))
    expected = sigma**2 * (alpha / D * np.eye(D) + (1 - alpha) * np.outer(u, u))
    np.testing.assert_allclose(eps.T @ eps / pairs, expected, atol=0.04)
    assert abs(np.mean(np.sum(eps**2, axis=1)) / sigma**2 - 1.0) < 0.02  # trace σ²


def test_without_a_gradient_it_is_plain_antithetic_es_at_alpha_one():
    es = jaxes.guided_es(8, 0.5, alpha=0.2, subspace_dims=3)
    state = es.init(jax.random.key(0), jnp.zeros(D))
    assert not np.any(np.asarray(state.basis))
    population, state = es.ask(jax.random.key(1), state)
    z = standard_normal(state.key, 1, D + 3, jnp.float32)[:D]
    np.testing.assert_allclose(population[2], 0.5 * z / math.sqrt(D), rtol=1e-6)


def test_guide_keeps_only_what_each_gradient_adds():
    es = jaxes.guided_es(8, 0.5, subspace_dims=3)
    state = es.init(jax.random.key(0), jnp.zeros(4))
    state = jaxes.guide(state, jnp.array([1.0, 0.0, 0.0, 0.0]))
    state = jaxes.guide(state, jnp.array([2.0, 0.0, 0.0, 0.0]))  # dependent: adds nothing
    state = jaxes.guide(state, jnp.array([0.0, jnp.nan, 0.0, 0.0]))  # non-finite: nothing
    np.testing.assert_allclose(np.abs(np.asarray(state.basis)[:, 1]), [1.0, 0.0, 0.0, 0.0])
    assert not np.any(np.asarray(state.basis)[:, [0, 2]])
    state = jaxes.guide(state, jnp.array([3.0, 4.0, 0.0, 0.0]))
    np.testing.assert_allclose(np.asarray(state.basis)[:, 0], [0.6, 0.8, 0.0, 0.0], atol=1e-6)
    assert not np.any(np.asarray(state.basis)[:, 1])  # the NaN's slot, until it leaves
    np.testing.assert_allclose(np.asarray(state.basis)[:, 2], [0.8, -0.6, 0.0, 0.0], atol=1e-6)
    guided = jax.jit(jaxes.guide)(state, jnp.ones(4))  # traced as well
    assert guided.basis.shape == (4, 3)


def test_the_estimate_is_the_papers_with_raw_fitness():
    """``β/(2σ²N) Σ_j (f⁺_j - f⁻_j) ε_j`` with the fitness itself (``fitness_shaping="raw"``)."""
    es = jaxes.guided_es(8, 0.3, fitness_shaping="raw", beta=2.0, subspace_dims=2)
    state = jaxes.guide(es.init(jax.random.key(0), PARAMS), gradient(5))
    population, state = es.ask(jax.random.key(1), state)
    fitness = jax.vmap(lambda x: -jnp.sum(x["w"] ** 2) + jnp.sum(x["b"]))(population)
    direction, _ = es.estimate(state, fitness)
    pop = np.stack([flat(jax.tree.map(lambda x, i=i: x[i], population)) for i in range(8)])
    f = np.asarray(fitness, np.float64)
    eps = pop[0::2] - flat(state.params)
    expected = 2.0 / (2 * 0.3**2 * 4) * ((f[0::2] - f[1::2]) @ eps)
    np.testing.assert_allclose(flat(direction), expected, rtol=2e-4, atol=1e-6)


def test_guide_and_the_factory_refuse_what_they_cannot_use():
    with pytest.raises(ValueError, match="^state: guide takes a GuidedESState, got OpenESState"):
        jaxes.guide(jaxes.open_es(4).init(jax.random.key(0), jnp.zeros(3)), jnp.zeros(3))
    state = jaxes.guided_es(4).init(jax.random.key(0), jnp.zeros(3))
    with pytest.raises(ValueError, match="^gradient: expected a pytree with the params'"):
        jaxes.guide(state, jnp.zeros(4))
    with pytest.raises(ValueError, match=r"^subspace_dims: expected an int in \[1, d = 3\]"):
        jaxes.guided_es(4, subspace_dims=4).init(jax.random.key(0), jnp.zeros(3))


def test_jaxes_train_builds_it_guided_by_its_past_steps_at_alpha_0_95():
    """The app's guided_es (``build.TRAIN_SETTINGS``): after one tell the basis is that step,
    and members are θ ± σ (√(0.95/d) z₁ + √0.05 u z₂)."""
    config = TrainConfig.make(env="fast", strategy="guided_es")
    assert TrainConfig.from_dict(config.to_dict()) == config  # config.json round trip
    es = build_lib._strategy(config.strategy)
    sigma = config.strategy.sigma
    step, _, _, state = told(es, es.init(jax.random.key(0), PARAMS), 1)
    u = np.asarray(state.basis[:, 0], np.float64)
    np.testing.assert_allclose(u, step / np.linalg.norm(step), atol=1e-5)
    population, state = es.ask(jax.random.key(2), state)
    z = np.asarray(standard_normal(state.key, 0, D + 1, jnp.float32), np.float64)
    eps = sigma * (math.sqrt(0.95 / D) * z[:D] + math.sqrt(0.05) * u * z[D])
    got = flat(jax.tree.map(lambda x: x[0], population))
    np.testing.assert_allclose(got, flat(state.params) + eps, rtol=1e-5, atol=1e-6)


def test_jaxes_train_runs_it_and_resumes_bit_identically(capsys, tmp_path):
    flags = ["--env", "fast", "--strategy", "guided_es", "--population", "8", "--eval-every", "1"]
    flags += ["--checkpoint-every", "1", "--eval-episodes", "1"]
    whole, parts = str(tmp_path / "whole"), str(tmp_path / "parts")
    assert cli.main(["train", *flags, "--generations", "3", "--out", whole]) == 0
    assert cli.main(["train", *flags, "--generations", "2", "--out", parts]) == 0
    assert cli.main(["train", "--resume", "--generations", "3", "--out", parts]) == 0
    capsys.readouterr()
    (_, _, _, step_a, a), (_, _, _, step_b, b) = train.load_run(whole), train.load_run(parts)
    assert step_a == step_b == 3
    assert_states_identical(a, b)
    basis = np.asarray(a.strategy_state.basis)  # guided: the last step, checkpointed
    np.testing.assert_allclose(np.linalg.norm(basis, axis=0), 1.0, rtol=1e-5)


def told(es, state, seed, fitness_fn=None):
    """One ask and tell; returns ``(θ' - θ flattened, population, fitness, new state)``."""
    population, asked = es.ask(jax.random.key(seed), state)
    fitness_fn = fitness_fn or (lambda x: -jnp.sum((x["w"] - 0.3) ** 2) + jnp.sum(x["b"]))
    fitness = jax.vmap(fitness_fn)(population)
    new, info = es.tell(asked, fitness)
    assert bool(info.applied)
    return flat(new.params) - flat(asked.params), population, fitness, new


def test_with_past_steps_the_basis_spans_the_last_steps_and_without_it_stays_as_guided():
    es = jaxes.guided_es(8, 0.3, subspace_dims=3, past_steps=True)
    state = es.init(jax.random.key(0), PARAMS)
    first, _, _, state = told(es, state, 1)
    second, _, _, state = told(es, state, 2)
    expected = orthonormal(jnp.stack([jnp.asarray(second), jnp.asarray(first)], axis=1))
    basis = np.asarray(state.basis)
    # Adam's first steps are nearly parallel: the second column is their small difference, so
    # the rounding of θ' - θ against the step added to θ shows at 1e-5.
    np.testing.assert_allclose(basis[:, :2], np.asarray(expected), atol=1e-4)
    assert not np.any(basis[:, 2])  # two steps, two columns
    # A tell that applies nothing (every fitness equal) takes no step and keeps the basis.
    population, asked = es.ask(jax.random.key(3), state)
    kept, info = es.tell(asked, jnp.zeros(8))
    assert not bool(info.applied)
    np.testing.assert_array_equal(np.asarray(kept.basis), basis)
    # Off (the default): tell leaves the basis as guide left it, zeros if never guided.
    plain = jaxes.guided_es(8, 0.3, subspace_dims=3)
    state = plain.init(jax.random.key(0), PARAMS)
    for seed in (1, 2):
        state = told(plain, state, seed)[3]
    assert not np.any(np.asarray(state.basis))
    guided = jaxes.guide(state, gradient(5))
    state = told(plain, guided, 6)[3]
    np.testing.assert_array_equal(np.asarray(state.basis), np.asarray(guided.basis))


def test_a_run_guided_by_its_past_steps_still_moves_theta_to_the_centre_of_mass():
    """Members along the last step (the basis filled), and θ' - θ = lr β (m̄/σ²)(M - c)
    with plain SGD: the centre-of-mass update, whatever the members' covariance."""
    sigma, lr, beta = 0.3, 0.05, 2.0
    es = jaxes.guided_es(
        8, sigma, alpha=0.2, beta=beta, subspace_dims=2, past_steps=True, optimizer=optax.sgd(lr)
    )
    state = told(es, es.init(jax.random.key(0), PARAMS), 1)[3]
    assert np.any(np.asarray(state.basis[:, 0])) and not np.any(np.asarray(state.basis[:, 1]))
    step, population, fitness, new = told(es, state, 2)
    x = np.stack([flat(jax.tree.map(lambda v, i=i: v[i], population)) for i in range(8)])
    w = np.asarray(jaxes.centered_rank(fitness), np.float64)
    mass = w - w.min()
    com, centroid = mass @ x / mass.sum(), x.mean(axis=0)
    np.testing.assert_allclose(centroid, flat(state.params), atol=1e-6)  # antithetic pairs
    expected = lr * beta * mass.mean() / sigma**2 * (com - centroid)
    np.testing.assert_allclose(step, expected, rtol=1e-4, atol=1e-6)
    newest = np.asarray(new.basis[:, 0])  # and that step is the newest guiding direction
    np.testing.assert_allclose(newest, step / np.linalg.norm(step), atol=1e-5)


# The small-budget version of benchmarks/guided_es.py: d = 300, ρ = 0.5, three seeds.
SMALL_D, SMALL_P = 300, 20


def evaluations_to_a_tenth(es, guided: bool, seed: int, generations: int = 300) -> float:
    x0 = jnp.ones(SMALL_D)
    scale = float(jnp.linalg.norm(x0))  # ‖∇L(x₀)‖

    def loss(x):
        return 0.5 * jnp.sum(x * x)

    @jax.jit
    def run(seed):
        bias_key, noise_key, init_key, run_key = jax.random.split(jax.random.key(seed), 4)
        bias = jax.random.normal(bias_key, (SMALL_D,))
        bias = bias * (0.5 * scale / jnp.linalg.norm(bias))

        def generation(state, keys):
            if guided:  # the surrogate: the gradient, a fixed bias and fresh noise
                noise = 0.5 * scale / math.sqrt(SMALL_D) * jax.random.normal(keys[0], (SMALL_D,))
                state = jaxes.guide(state, state.params + bias + noise)
            population, state = es.ask(keys[1], state)
            state, _ = es.tell(state, -jax.vmap(loss)(population))
            return state, loss(state.params) / loss(x0)

        keys = jnp.stack(
            [jax.random.split(noise_key, generations), jax.random.split(run_key, generations)],
            axis=1,
        )
        return jax.lax.scan(generation, es.init(init_key, x0), keys)[1]

    hit = np.nonzero(np.asarray(run(seed)) <= 0.1)[0]
    return float((hit[0] + 1) * SMALL_P) if hit.size else math.inf


def test_with_a_biased_surrogate_it_reaches_a_tenth_of_the_loss_before_open_es():
    open_es = jaxes.open_es(SMALL_P, 0.03, optimizer=optax.sgd(0.03), fitness_shaping="raw")
    guided = jaxes.guided_es(
        SMALL_P,
        0.03 * math.sqrt(SMALL_D),
        optimizer=optax.sgd(5.0),
        fitness_shaping="raw",
        alpha=0.95,
    )
    for seed in range(3):
        plain = evaluations_to_a_tenth(open_es, False, seed)
        steered = evaluations_to_a_tenth(guided, True, seed)
        assert steered < plain, (seed, steered, plain)
