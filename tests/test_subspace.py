"""Random-subspace search (θ = θ₀ + Π z) and the paper's §3.2 doubled-features example."""

import io

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from test_parallel import max_diff, one_device, shard_mapped

import jaxes
from jaxes import subspace, training
from jaxes.tasks.functions import function_task

PARAMS = {"w": jnp.ones((6, 5)), "b": jnp.zeros(5)}


def projection_matrix(es, key, d=4096, k=4):
    """Π (d x k) as ``lift`` applies it: the lifts of the unit vectors from θ₀ = 0."""
    state = es.init(key, {"w": jnp.zeros(d)})
    return np.asarray(jax.vmap(lambda e: subspace.lift(state, e)["w"])(jnp.eye(k)), np.float64).T


@pytest.mark.parametrize("projection", ["dense", "sparse"])
def test_projection_columns_have_unit_norm_and_members_are_rebuilt_exactly(projection):
    es = subspace.subspace(jaxes.open_es(8, 0.1, noise="gaussian"), 4, projection)
    state = es.init(jax.random.key(0), {"w": jnp.zeros(4096)})
    columns = jax.vmap(lambda e: subspace.lift(state, e)["w"])(jnp.eye(4))
    norms = np.linalg.norm(np.asarray(columns), axis=1)
    assert np.all(np.abs(norms - 1) < 0.1), norms
    # Near-orthonormal: each entry of ΠᵀΠ - I is a sum of d terms of size 1/d (sd √(2/d)).
    pi = projection_matrix(es, jax.random.key(0))
    assert np.max(np.abs(pi.T @ pi - np.eye(4))) < 5 / np.sqrt(4096)
    # Π comes from the key alone: the same key, the same Π; another key, another Π.
    assert np.array_equal(pi, projection_matrix(es, jax.random.key(0)))
    assert np.max(np.abs(pi - projection_matrix(es, jax.random.key(1)))) > 0.05
    if projection == "sparse":
        # Each row: `nonzeros` (4) entries ±√(k/(d·nonzeros)), summed where columns repeat.
        units = pi / np.sqrt(4 / (4096 * 4))
        assert np.array_equal(units, np.round(units))
        per_row = np.abs(units).sum(1)
        assert per_row.max() <= 4 and np.all(per_row % 2 == 0), per_row
        assert np.count_nonzero(pi, axis=1).max() <= 4 and np.count_nonzero(pi) > 4096
    population, state = es.ask(jax.random.key(1), state)
    alone = jax.vmap(lambda i: es.member(state, i))(jnp.arange(8))
    assert bool(jnp.array_equal(population["w"], alone["w"]))
    z = jax.vmap(lambda i: jaxes.open_es(8, 0.1, noise="gaussian").member(state.inner, i))(
        jnp.arange(8)
    )
    assert max_diff(alone, jax.vmap(lambda v: subspace.lift(state, v))(z)) == 0.0


def test_the_search_lives_in_k_dimensions_and_the_centre_follows():
    es = subspace.subspace(jaxes.open_es(16, 0.1, learning_rate=0.1, noise="gaussian"), 3)
    state = es.init(jax.random.key(0), PARAMS)
    theta0 = jaxes.centre(state)
    assert max_diff(theta0, PARAMS) < 1e-6  # z starts at 0
    f = jax.jit(lambda p: -jnp.sum(p["w"] ** 2) - jnp.sum((p["b"] - 1) ** 2))

    @jax.jit
    def generation(s, key):
        population, s = es.ask(key, s)
        return es.tell(s, jax.vmap(f)(population))[0], None

    state, _ = jax.lax.scan(generation, state, jax.random.split(jax.random.key(1), 50))
    moved = jax.tree.map(jnp.subtract, jaxes.centre(state), theta0)
    flat = jnp.concatenate([moved["b"], moved["w"].ravel()])
    # Every move is Π Δz: a 35-d displacement inside a 3-d subspace, and it helped.
    basis = jax.vmap(
        lambda e: jnp.concatenate(
            [
                x.ravel()
                for x in jax.tree.leaves(
                    jax.tree.map(jnp.subtract, subspace.lift(state, e), theta0)
                )
            ]
        )
    )(jnp.eye(3))
    residual = flat - basis.T @ jnp.linalg.lstsq(basis.T, flat)[0]
    assert float(jnp.linalg.norm(residual)) < 1e-4 * float(jnp.linalg.norm(flat))
    assert float(f(jaxes.centre(state))) > float(f(theta0)) + 1.0
    # The same search as plain open_es over z on g(z) = f(θ₀ + Π z), with the same keys.
    plain = jaxes.open_es(16, 0.1, learning_rate=0.1, noise="gaussian")
    start = es.init(jax.random.key(0), PARAMS)

    @jax.jit
    def plain_generation(s, key):
        population, s = plain.ask(key, s)
        return plain.tell(s, jax.vmap(lambda z: f(subspace.lift(start, z)))(population))[0], None

    inner, _ = jax.lax.scan(plain_generation, start.inner, jax.random.split(jax.random.key(1), 50))
    np.testing.assert_allclose(state.inner.params, inner.params, atol=1e-6)


def test_subspace_strategy_runs_in_the_runner_and_over_devices(tmp_path):
    es = subspace.subspace(jaxes.open_es(16, 0.05, learning_rate=0.05, noise="gaussian"), 4)
    task = function_task("rosenbrock", 10, start=0.0)
    single = one_device(task, es).strategy_state
    split = shard_mapped(task, es).strategy_state
    assert max_diff(single.inner.params, split.inner.params) <= 1e-5
    start = training.init_state(es, task, 0)
    assert max_diff(single.inner.params, start.strategy_state.inner.params) > 1e-3  # it moved

    def train(out, generations, resume=False):
        return training.run(es, task, str(tmp_path / out), generations=generations,
                          eval_every=3, checkpoint_every=3, plot=False, resume=resume,
                          stream=io.StringIO())  # fmt: skip

    whole = train("a", 6)
    train("b", 3)
    resumed = train("b", 6, resume=True)
    assert resumed["start_generation"] == 3 and resumed["generations"] == 6
    assert whole["final_eval_return"] == pytest.approx(resumed["final_eval_return"], rel=1e-6)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: subspace.subspace(jaxes.open_es(8), 0), r"^dim: expected an int >= 1"),
        (lambda: subspace.subspace(jaxes.open_es(8), 3, "fastfood"), r"^projection: unknown"),
        (lambda: subspace.subspace(jaxes.open_es(8), 3, "sparse", nonzeros=0), r"^nonzeros:"),
        (
            lambda: subspace.subspace(jaxes.open_es(8), 36).init(jax.random.key(0), PARAMS),
            r"^dim: the subspace cannot have more dimensions \(36\) than the parameters \(35\)",
        ),
    ],
)
def test_bad_subspace_settings_are_one_line_errors(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_doubled_features_with_scaled_sigma_and_step_follow_the_original():
    # Salimans et al. §3.2: duplicating every feature of a linear regression leaves ES
    # unchanged in distribution when σ is divided by √2 and the SGD step by 2.
    n, d, seeds, generations, p = 64, 4, 128, 25, 16
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (n, d))
    y = x @ jax.random.normal(kw, (d,))

    def losses(features, sigma, lr, theta0):
        es = jaxes.open_es(p, sigma, optimizer=optax.sgd(lr), fitness_shaping="raw",
                           noise="gaussian", track_best=False)  # fmt: skip

        def loss(theta):
            return jnp.mean((features @ theta - y) ** 2)

        def run(seed_key):
            def gen(s, key):
                population, s = es.ask(key, s)
                s, _ = es.tell(s, -jax.vmap(loss)(population))
                return s, loss(s.params)

            state = es.init(seed_key, theta0)
            return jax.lax.scan(gen, state, jax.random.split(seed_key, generations))[1]

        return jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(1), seeds))

    theta0 = jnp.zeros(d)
    original = np.asarray(losses(x, 0.1, 0.02, theta0))
    doubled = np.asarray(
        losses(jnp.concatenate([x, x], 1), 0.1 / np.sqrt(2), 0.01, jnp.zeros(2 * d))
    )
    wrong = np.asarray(losses(jnp.concatenate([x, x], 1), 0.1, 0.02, jnp.zeros(2 * d)))
    stderr = np.sqrt(original.var(0) / seeds + doubled.var(0) / seeds)
    z = np.abs(original.mean(0) - doubled.mean(0)) / stderr
    assert np.all(z < 4.5), z
    assert original.mean(0)[-1] < 0.5 * original.mean(0)[0]  # it learns
    # Without the rescaling the doubled problem takes bigger steps: visibly different.
    assert np.max(np.abs(original.mean(0) - wrong.mean(0)) / stderr) > 6


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--subspace-dim", "0"], "subspace_dim: expected an int >= 1"),
        (["--subspace-dim", "4", "--subspace-projection", "fastfood"], "subspace_projection:"),
        (["--env", "fast", "--subspace-dim", "4"], "subspace_dim: 4 is more than the policy's 3"),
    ],
)
def test_cli_bad_subspace_settings_are_one_line(capsys, tmp_path, flags, message):
    from jaxes.app.cli import main

    code = main(["train", *flags, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_jaxes_train_subspace_settings_reach_the_strategy_and_config_reads_back(tmp_path):
    # Wiring only (jit(...).lower: traced, not compiled).
    from jaxes.app.build import build
    from jaxes.app.config import TrainConfig, read_config
    from jaxes.step import generation_step

    config = TrainConfig.make(
        env="fast", policy="mlp", subspace_dim=5, subspace_projection="sparse"
    )
    strategy, task = build(config)
    state = training.init_state(strategy, task, 0)
    assert isinstance(state.strategy_state, subspace.SubspaceState)
    assert state.strategy_state.inner.params.shape == (5,)
    assert state.strategy_state.projection == "sparse"
    jax.jit(generation_step(strategy, task)).lower(state)
    path = tmp_path / "config.json"
    path.write_text(config.to_json())
    assert read_config(str(path)) == config
