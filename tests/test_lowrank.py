"""Low-rank perturbations: their moments, the factored tell and the factored forward pass
against the materialised ones, the device split, and bad input."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from test_parallel import max_diff, one_device, shard_mapped
from test_unbiased import OBJECTIVES, SIGMA, THETA, P, within_standard_errors

import jaxes
from jaxes import evaluation, factored
from jaxes.app.cli import main
from jaxes.factored.lowrank import LowRank, is_factored
from jaxes.noise import Perturbations, lowrank
from jaxes.tasks.functions import function_task

# Several matrices, biases and a 3-D leaf (a batch of two 3 x 4 matrices).
LIKE = {
    "dense": {"kernel": jnp.zeros((6, 5)), "bias": jnp.zeros(5)},
    "out": {"kernel": jnp.zeros((5, 3)), "bias": jnp.zeros(3)},
    "stack": jnp.zeros((2, 3, 4)),
}


def test_second_moments_are_the_identity():
    # E[vec(ε) vec(ε)ᵀ] = I for ε = A Bᵀ/√r, entry by entry within 5 standard errors.
    src = lowrank(2)
    like = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(2), "t": jnp.zeros((2, 2, 3))}
    draws = 40_000

    @jax.jit
    def second_moments(keys):
        eps = jax.vmap(lambda k: ravel_pytree(src.sample(None, k, 0, like))[0])(keys)
        outer = eps[:, :, None] * eps[:, None, :]
        return outer.mean(0), outer.std(0) / np.sqrt(draws), eps[:, -12:]  # "w" sorts last

    mean, stderr, w = second_moments(jax.random.split(jax.random.key(0), draws))
    mean, stderr = np.asarray(mean), np.asarray(stderr)
    assert mean.shape == (26, 26)
    assert np.max(stderr) < 0.06  # tight enough that a wrong scale (e.g. no 1/√r) fails
    assert np.all(np.abs(mean - np.eye(26)) <= 5 * stderr)
    # ... and the 3 x 4 leaf really has rank 2, not full rank.
    ranks = np.linalg.matrix_rank(np.asarray(w[:50]).reshape(50, 3, 4))
    assert set(ranks.tolist()) == {2}


def test_rank_is_clamped_per_leaf_and_must_be_positive():
    f = lowrank(4).factors(None, jax.random.key(0), 0, {"w": jnp.zeros((2, 5))})
    assert f["w"].a.shape == (2, 2) and f["w"].b.shape == (5, 2)
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match=r"^rank: expected an int >= 1"):
            jaxes.open_es(8, noise=jaxes.noise.lowrank(bad))


@pytest.mark.parametrize("name", ["linear", "quadratic"])
def test_low_rank_estimator_is_unbiased(name):
    # θ as a 2 x 2 matrix, so every perturbation is a rank-1 product (not Gaussian).
    f, truth = OBJECTIVES[name]
    es = jaxes.open_es(P, SIGMA, fitness_shaping="raw", noise=jaxes.noise.lowrank(1))
    state = es.init(jax.random.key(0), THETA.reshape(2, 2))

    @jax.jit
    def estimates(keys):
        def one(key):
            population, s = es.ask(key, state)
            direction, _ = es.estimate(s, jax.vmap(lambda x: f(x.reshape(-1)))(population))
            return direction.reshape(-1)

        return jax.vmap(one)(keys)

    within_standard_errors(estimates(jax.random.split(jax.random.key(1), 4000)), truth)


ES = jaxes.open_es(8, 0.1, noise=jaxes.noise.lowrank(2))


def drawn_state(strategy=ES, params=LIKE, seed=0):
    params = jax.tree.map(
        lambda x: jax.random.normal(jax.random.key(seed), x.shape, x.dtype), params
    )
    state = strategy.init(jax.random.key(seed), params)
    return strategy.ask(jax.random.key(seed + 1), state)


def test_members_are_rebuilt_bit_identically_and_displacements_match():
    population, state = drawn_state()
    alone = jax.vmap(lambda i: ES.member(state, i))(jnp.arange(8))
    assert all(
        bool(jnp.array_equal(a, b))
        for a, b in zip(jax.tree.leaves(population), jax.tree.leaves(alone), strict=True)
    )
    deltas = jax.vmap(lambda i: factored.member(state.params, ES.perturbation(state, i)))(
        jnp.arange(8)
    )
    assert max_diff(deltas, population) < 1e-6
    delta = ES.perturbation(state, 3)
    assert isinstance(delta["stack"], LowRank) and delta["stack"].a.shape == (2, 3, 2)
    assert isinstance(delta["dense"]["bias"], jax.Array)


@pytest.mark.parametrize("chunk", [8, 4, 1])  # written in two halves by a loop; 1 directly
def test_map_members_hands_over_the_displacements_bit_identically(chunk):
    _, state = drawn_state()
    got = jax.jit(
        lambda s: evaluation.map_members(ES, s, lambda d: d, chunk=chunk, build=ES.perturbation)
    )(state)
    got = jax.tree.map(lambda x: x.reshape((8,) + x.shape[2:]), got)
    alone = jax.jit(jax.vmap(lambda i: ES.perturbation(state, i)))(jnp.arange(8))
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(alone), strict=True)
    assert all(bool(jnp.array_equal(a, b)) for a, b in pairs)


@pytest.mark.parametrize("antithetic", [True, False])
@pytest.mark.parametrize("budget", [None, 700])  # 700 bytes: several chunks and padding
def test_tell_sums_factors_as_the_materialised_noise_does(antithetic, budget):
    src = lowrank(2)
    kw = dict(population_size=10, antithetic=antithetic, memory_budget=budget)
    factored_sums = Perturbations(src, **kw)
    dense_sums = Perturbations(src._replace(factors=None, combine=None), **kw)
    chunk = factored_sums._factor_chunk(None, jax.random.key(0), LIKE)
    assert chunk == factored_sums.num_base if budget is None else chunk < factored_sums.num_base
    coeffs = jax.random.normal(jax.random.key(2), (2, 10))
    sigma = jax.tree.map(lambda x: jnp.full(x.shape, 0.3), LIKE)  # σ per coordinate, too
    sigma["stack"] = jnp.full((2, 3, 4), 0.1)
    args = (None, jax.random.key(1), LIKE, sigma, coeffs)
    got, _ = factored_sums.moments(*args)
    want, _ = dense_sums.moments(*args)
    assert max_diff(got, want) < 1e-5
    assert max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(want)) > 0.1


def bf16(tree):
    return jax.tree.map(lambda x: x.astype(jnp.bfloat16), tree)


@pytest.mark.parametrize("antithetic", [True, False])
def test_a_mixed_bf16_tree_sums_its_factors_and_the_rounded_leaves_realised_steps(antithetic):
    # bfloat16 matrices with factored noise (members round(θ) + δ, not rounded) beside
    # bfloat16 biases (members rounded): the matrices' sums are contracted from the factors,
    # the biases' are the displacements their members really had, as dense noise gives.
    src = lowrank(2)
    kw = dict(population_size=10, antithetic=antithetic)
    factored_sums = Perturbations(src, **kw)
    dense_sums = Perturbations(src._replace(factors=None, combine=None), **kw)
    params = bf16(jax.tree.map(lambda x: x + 0.37, LIKE))
    dtypes = factored_sums.member_dtypes(None, params, None)
    coeffs = jax.random.normal(jax.random.key(2), (2, 10)).at[1].set(1.0)
    args = (None, jax.random.key(1), jax.tree.map(lambda x: x.astype(jnp.float32), params), 0.3)
    got, _ = factored_sums.moments(*args, coeffs, None, params, paired_rows=(1,))
    want, _ = dense_sums.moments(*args, coeffs, None, dtypes)
    assert max_diff(got[0], want[0]) < 1e-5
    if antithetic:
        # Row 1 (ones, paired) is exactly zero for the matrices, and the biases' realised one.
        assert all(float(jnp.max(jnp.abs(got[1][k]["kernel"]))) == 0.0 for k in ("dense", "out"))
        assert float(jnp.max(jnp.abs(got[1]["stack"]))) == 0.0
    for k in ("dense", "out"):
        np.testing.assert_array_equal(got[1][k]["bias"], want[1][k]["bias"])


@pytest.mark.parametrize(
    "noise, cast", [("gaussian", bf16), ("gaussian", lambda t: t), (lowrank(2), lambda t: t)]
)
def test_paired_rows_change_nothing_where_every_leaf_is_rounded_or_none_is(noise, cast):
    # Per-leaf rounding against the tree-wide rule it replaces: with every leaf rounded
    # (bfloat16, dense noise) the ones row is summed for all, bit for bit; with none rounded
    # (float32) it is exactly zero and the mass row is as summed alone.
    src = jaxes.noise.gaussian() if noise == "gaussian" else noise
    pert = Perturbations(src, population_size=10, antithetic=True)
    params = cast(jax.tree.map(lambda x: x + 0.37, LIKE))
    master = jax.tree.map(lambda x: x.astype(jnp.float32), params)
    mass = jax.random.uniform(jax.random.key(3), (10,))
    both = jnp.stack([mass, jnp.ones(10)])
    args = (None, jax.random.key(1), master, 0.3)
    got, _ = jax.jit(lambda: pert.moments(*args, both, None, params, paired_rows=(1,)))()
    rounded = any(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params))
    if rounded:
        want, _ = jax.jit(lambda: pert.moments(*args, both, None, params))()
    else:
        alone, _ = jax.jit(lambda: pert.moments(*args, mass[None], None, params))()
        want = [alone[0], jax.tree.map(jnp.zeros_like, alone[0])]
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_a_mixed_bf16_tree_tells_with_the_scratch_of_its_matrices_alone():
    # A bfloat16 bias beside a bfloat16 low-rank matrix used to make the whole tree
    # "rounded": every leaf rebuilt dense with a second running sum (Σ δ_i). Decided per
    # leaf, the matrix keeps its factored sum, so the bias adds next to nothing.
    es = jaxes.open_es(64, 0.1, noise=jaxes.noise.lowrank(1), track_best=False)

    def scratch(params):
        state = es.init(jax.random.key(0), params)
        _, state = es.ask(jax.random.key(1), state)
        lowered = jax.jit(es.tell, donate_argnums=0).lower(state, jnp.arange(64.0))
        return lowered.compile().memory_analysis().temp_size_in_bytes

    matrix = jnp.zeros((512, 512), jnp.bfloat16)
    alone = scratch({"w": matrix})
    mixed = scratch({"w": matrix, "b": jnp.zeros(512, jnp.bfloat16)})
    assert mixed < alone + 512 * 512  # a quarter of the matrix's float32 bytes


def factored_tell_scratch(population_size):
    """Bytes of scratch XLA plans for the factored, donated tell of a 512 x 512 matrix."""
    es = jaxes.open_es(population_size, 0.1, noise=jaxes.noise.lowrank(1), track_best=False)
    params = jnp.zeros((512, 512))
    state = es.init(jax.random.key(0), params)
    _, state = es.ask(jax.random.key(1), state)
    fitness = jnp.arange(float(population_size))
    compiled = jax.jit(es.tell, donate_argnums=0).lower(state, fitness).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_factored_tell_holds_no_member_matrix():
    # memory_analysis is deterministic: the factored, donated tell of a 512 x 512 matrix
    # with 32 bases needs less scratch than four such matrices (a stack of them: 32).
    matrix = 512 * 512 * 4
    scratch = factored_tell_scratch(64)
    assert scratch < 4 * matrix
    # Growth, not size: 1 base (P = 2) to 32 bases adds less than one matrix (measured: 0;
    # a stack of the bases' matrices adds 30).
    assert scratch - factored_tell_scratch(2) < matrix


class Model(nn.Module):
    """Two dense layers, biases, and a 3-D kernel read by an einsum (no nn.Dense)."""

    @nn.compact
    def __call__(self, x):
        h = jnp.tanh(nn.Dense(5, name="dense")(x))
        stack = self.param("stack", nn.initializers.normal(0.5), (2, 3, 4))
        extra = jnp.einsum("i,kij->j", h[..., :3].mean(0), stack).sum()
        return nn.Dense(3, name="out")(h) + extra


def test_flax_apply_and_evaluate_equal_the_materialised_members():
    model = Model()
    x = jax.random.normal(jax.random.key(5), (7, 6))
    params = model.init(jax.random.key(0), x)["params"]
    assert jax.tree.map(jnp.shape, params) == jax.tree.map(jnp.shape, LIKE)
    state = ES.init(jax.random.key(0), params)
    _, state = ES.ask(jax.random.key(1), state)

    def fitness(p):
        return -jnp.sum(model.apply({"params": p}, x) ** 2)

    def factored_fitness(centre, delta):
        return -jnp.sum(factored.apply(model, centre, delta, x) ** 2)

    want = jax.jit(lambda s: jaxes.evaluate(ES, s, fitness))(state)
    got = jax.jit(lambda s: factored.evaluate(ES, s, factored_fitness))(state)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert float(jnp.std(want)) > 1e-3  # the members differ
    # matmul, the hand-written route, agrees too.
    delta = ES.perturbation(state, 5)
    np.testing.assert_allclose(
        factored.matmul(x, params["dense"]["kernel"], delta["dense"]["kernel"]),
        x @ (params["dense"]["kernel"] + delta["dense"]["kernel"].dense()),
        rtol=1e-5,
        atol=1e-6,
    )


def test_classical_estimator_check_passes_with_low_rank_noise():
    params = jax.tree.map(lambda x: x + 0.5, LIKE)
    es = jaxes.open_es(16, 0.1, noise=jaxes.noise.lowrank(2))
    jaxes.testing.assert_update_matches_classical(
        es, params, lambda p: -sum(jnp.sum(x**2) for x in jax.tree.leaves(p)), jax.random.key(3)
    )


@pytest.mark.parametrize(
    "strategy",
    [
        jaxes.open_es(16, 0.05, learning_rate=0.05, noise=jaxes.noise.lowrank(2)),
        jaxes.pgpe(16, 0.05, sigma_learning_rate=0, noise="lowrank"),
        jaxes.ars(16, 0.05, learning_rate=0.05, noise=jaxes.noise.lowrank(2)),
    ],
    ids=["open_es", "pgpe", "ars"],
)
def test_device_split_gives_the_one_device_params(strategy):
    base = function_task("rosenbrock", 12, start=0.0)
    task = dataclasses.replace(
        base,
        init_params=lambda key: jnp.zeros((3, 4)),
        evaluate=lambda key, members, ts: base.evaluate(key, members.reshape(-1, 12), ts),
    )
    single = one_device(task, strategy).strategy_state
    split = shard_mapped(task, strategy).strategy_state
    assert max_diff(single.params, split.params) <= 1e-5
    assert float(jnp.max(jnp.abs(single.params))) > 1e-2


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: jaxes.sep_cma_es(8, noise="lowrank"), "sep_cma_es's covariance"),
        (lambda: jaxes.pgpe(8, noise="lowrank"), "pgpe's σ update"),
        (lambda: jaxes.snes(8, noise="lowrank"), "snes's σ update"),
        (lambda: jaxes.open_es(8, noise="lowrnk"), "got 'lowrnk'"),
    ],
)
def test_strategies_refuse_what_low_rank_noise_cannot_serve(build, message):
    with pytest.raises(ValueError, match=rf"^noise: .*{message}"):
        build()


def test_factored_displacements_need_one_sigma_per_leaf():
    es = jaxes.snes(8, 0.1, sigma_learning_rate=0, noise="lowrank")
    _, state = drawn_state(es)
    with pytest.raises(ValueError, match=r"^sigma: a factored displacement needs one σ per leaf"):
        es.perturbation(state, 0)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--noise", "lowrank", "--noise-rank", "0"], "noise_rank: expected an int >= 1"),
        (["--noise", "lowrank", "--strategy", "sep_cma_es"], "sep_cma_es: noise: 'lowrank(r=1)'"),
    ],
)
def test_cli_bad_low_rank_settings_are_one_line(capsys, tmp_path, flags, message):
    code = main(["train", *flags, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_jaxes_train_settings_trace_a_brax_generation_with_low_rank_noise():
    # Wiring only (jit(...).lower: traced, not compiled): the CLI's settings reach the strategy.
    from jaxes import training
    from jaxes.app.build import build
    from jaxes.app.config import TrainConfig
    from jaxes.step import generation_step

    config = TrainConfig.make(env="fast", noise="lowrank", noise_rank=3, policy="mlp")
    strategy, task = build(config)
    state = training.init_state(strategy, task, 0)
    jax.jit(generation_step(strategy, task)).lower(state)
    delta = strategy.perturbation(state.strategy_state, 0)
    kernels = [x for x in jax.tree.leaves(delta, is_leaf=is_factored) if is_factored(x)]
    assert kernels and all(k.a.shape[-1] <= 3 for k in kernels)
    assert any(k.a.shape[-1] == 3 for k in kernels)
