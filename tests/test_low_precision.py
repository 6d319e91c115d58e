"""bfloat16 and int8 weights with low-rank noise, evaluated factored (issue 25).

A narrow leaf with factored noise has members ``round(θ) + δ`` (exact, float32): the update
estimates the gradient at the rounded centre. int8 weights run ``(x @ values) * scale``.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import factored
from jaxes.factored import int8
from jaxes.factored.lowrank import LowRank


class Net(nn.Module):
    """What a transformer holds: an embedding, a DenseGeneral over heads, a Dense, and the
    embedding reused as the output layer."""

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(11, 8)
        x = embed(tokens)  # (T, 8)
        h = nn.DenseGeneral((2, 3))(x)  # (T, 2, 3): heads
        x = nn.DenseGeneral(8, axis=(-2, -1))(jnp.tanh(h))  # heads merged back
        x = nn.Dense(8)(x)
        return embed.attend(x)


TOKENS = jnp.array([1, 4, 7, 10])
NET = Net()


def flax_variables(dtype=jnp.float32):
    variables = NET.init(jax.random.key(0), TOKENS)
    return jax.tree.map(lambda x: x.astype(dtype), variables)


def drawn(es, params, key=1):
    state = es.init(jax.random.key(0), params)
    _, state = es.ask(jax.random.key(key), state)
    return state


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_a_flax_transformer_kit_in_any_dtype_runs_factored_as_its_members(dtype):
    # The reproduction: flax params in bf16, noise="lowrank", factored.evaluate and
    # flax's own {"params": ...} variables. Every member equals the member built dense.
    variables = flax_variables(dtype)
    es = jaxes.open_es(4, sigma=0.05, noise=jaxes.noise.lowrank(2))
    state = drawn(es, variables["params"])

    def fitness(centre, delta):
        return jnp.sum(factored.apply(NET, {"params": centre}, delta, TOKENS) ** 2)

    got = factored.evaluate(es, state, fitness)
    members = jax.vmap(lambda i: es.member(state, i))(jnp.arange(4))
    ref = jax.vmap(lambda p: jnp.sum(NET.apply({"params": p}, TOKENS).astype(jnp.float32) ** 2))(
        members
    )
    tol = 1e-5 if dtype == jnp.float32 else 5e-3  # bf16: 1.8e-3 measured
    np.testing.assert_allclose(got, ref, rtol=tol)
    # Every matrix is served in the layers (no leaf is multiplied out first).
    delta = es.perturbation(state, 0)
    kinds = {
        type(x).__name__ for x in jax.tree.leaves(delta, is_leaf=lambda x: isinstance(x, LowRank))
    }
    assert "LowRank" in kinds


def test_a_rounded_leaf_with_factored_noise_is_its_rounded_centre_plus_the_exact_term():
    theta = jnp.array([[1.0 + 3 / 512, 2.0], [0.5, -1.0 - 5 / 1024]])
    es = jaxes.open_es(4, sigma=1e-3, noise=jaxes.noise.lowrank(1))
    state = drawn(es, {"w": theta.astype(jnp.bfloat16), "b": jnp.ones(2, jnp.bfloat16)})
    state = state.replace(params={"w": theta, "b": state.params["b"]})
    centre = jaxes.centre(state)
    for i in range(4):
        x, d = es.member(state, i), es.perturbation(state, i)
        # The matrix: float32, round(θ) + A Bᵀ (a σ of 1e-3 is below bf16's step at 1).
        assert x["w"].dtype == jnp.float32
        np.testing.assert_allclose(
            x["w"], centre["w"].astype(jnp.float32) + d["w"].dense(), atol=1e-7
        )
        assert not np.allclose(x["w"], centre["w"].astype(jnp.float32))
        # The bias (dense noise): its own dtype, round(θ + σε), and centre + δ rounds back to it.
        assert x["b"].dtype == jnp.bfloat16
        back = (centre["b"].astype(jnp.float32) + d["b"]).astype(jnp.bfloat16)
        assert bool(jnp.all(back == x["b"]))
        np.testing.assert_array_equal(factored.member(centre, d)["b"], x["b"])
    # ask's population holds the same members, bit for bit.
    population, _ = es.ask(jax.random.key(1), state)
    assert bool(jnp.all(population["w"][3] == es.member(state, 3)["w"]))
    # best_params comes back in the params' dtypes.
    state, _ = es.tell(state, jnp.arange(4.0))
    assert es.best_params(state)["w"].dtype == jnp.bfloat16


def test_the_bf16_factored_estimate_is_unbiased_for_the_gradient_at_the_rounded_centre():
    # F(W) = -½‖W - T‖²: the antithetic estimate with raw fitness is linear in ε εᵀ ∇F, so its
    # mean over draws is ∇F at the centre the members were built around, round(θ), not θ.
    theta = 8.0 + jnp.linspace(-0.03, 0.03, 12).reshape(4, 3)  # bf16's step at 8 is 1/16
    target = theta + 0.05
    es = jaxes.open_es(64, sigma=0.01, noise=jaxes.noise.lowrank(2), fitness_shaping="raw")
    eye = jnp.eye(4)

    def fitness(centre, delta):
        w = factored.apply(
            nn.Dense(3, use_bias=False), {"kernel": centre["w"]}, {"kernel": delta["w"]}, eye
        )
        return -0.5 * jnp.sum((w - target) ** 2)

    @jax.jit
    def direction(key):
        state = es.init(jax.random.key(0), {"w": theta.astype(jnp.bfloat16)})
        state = state.replace(params={"w": theta})
        _, state = es.ask(key, state)
        return es.estimate(state, factored.evaluate(es, state, fitness))[0]["w"]

    draws = jax.vmap(direction)(jax.random.split(jax.random.key(2), 1024))
    mean, stderr = draws.mean(0), draws.std(0) / np.sqrt(1024)
    at_rounded = target - theta.astype(jnp.bfloat16).astype(jnp.float32)
    at_master = target - theta
    assert np.all(np.abs(mean - at_rounded) <= 5 * stderr + 1e-6)
    assert np.max(np.abs(at_rounded - at_master)) > 10 * np.max(stderr)  # the test can tell


def test_a_bf16_dense_layer_adds_its_low_rank_term_in_float32_and_rounds_once():
    # 512 outputs and a term of a few bf16 steps: rounding the term to bf16 before the sum
    # (double rounding) changes some of them.
    rng = np.random.default_rng(1)
    w, b = rng.normal(size=(6, 32)), rng.normal(size=32)
    params = {"kernel": jnp.asarray(w, jnp.bfloat16), "bias": jnp.asarray(b, jnp.bfloat16)}
    x = jnp.asarray(rng.normal(size=(16, 6)), jnp.bfloat16)
    a = jnp.asarray(rng.normal(size=(6, 2)) * 0.01, jnp.float32)
    bb = jnp.asarray(rng.normal(size=(32, 2)), jnp.float32)
    got = factored.apply(nn.Dense(32), params, {"kernel": LowRank(a, bb), "bias": None}, x)
    out = nn.Dense(32).apply({"params": params}, x)  # the centre's bf16 product
    term = (x.astype(jnp.float32) @ a) @ bb.T
    want = (out.astype(jnp.float32) + term).astype(jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_int8_forward_equals_numpy():
    rng = np.random.default_rng(0)
    w, b, x = rng.normal(size=(6, 5)), rng.normal(size=5), rng.normal(size=(3, 6))
    q = int8.quantize({"kernel": jnp.asarray(w, jnp.float32), "bias": jnp.asarray(b, jnp.float32)})
    values, scale = np.asarray(q["kernel"].values), np.asarray(q["kernel"].scale)
    assert values.dtype == np.int8 and np.abs(values).max() == 127
    ref = (x @ values.astype(np.float64)) * scale + b
    got = factored.apply(nn.Dense(5), q, None, jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # ... and within a quantisation step of the float32 layer.
    assert np.max(np.abs(np.asarray(got) - (x @ w + b))) < 0.05
    # With a factored displacement, the low-rank term is added in float32 to the int8 product.
    a, bb = (
        jnp.asarray(rng.normal(size=(6, 2)), jnp.float32),
        jnp.asarray(rng.normal(size=(5, 2)), jnp.float32),
    )
    got = factored.apply(
        nn.Dense(5),
        q,
        {"kernel": LowRank(a, bb), "bias": jnp.zeros(5)},
        jnp.asarray(x, jnp.float32),
    )
    np.testing.assert_allclose(
        got, ref + x @ (np.asarray(a) @ np.asarray(bb).T), rtol=1e-4, atol=1e-4
    )


def test_int8_leaves_need_their_scales():
    params = {"kernel": jnp.ones((4, 3), jnp.int8), "bias": jnp.zeros(3)}
    with pytest.raises(ValueError, match=r"^params: leaf \['kernel'\] is int8 without scales"):
        factored.apply(nn.Dense(3), params, None, jnp.ones(4))


def test_int8_base_with_low_rank_members_matches_the_dequantized_members():
    params = flax_variables()["params"]
    es = jaxes.open_es(4, sigma=0.05, noise=jaxes.noise.lowrank(2))
    state = drawn(es, params)

    def fitness(centre, delta):
        return jnp.sum(factored.apply(NET, centre, delta, TOKENS) ** 2)

    got = factored.evaluate(es, state, fitness, quantize=True)
    base = int8.dequantize(int8.quantize(state.params))
    ref = jax.vmap(
        lambda i: jnp.sum(
            NET.apply({"params": factored.member(base, es.perturbation(state, i))}, TOKENS) ** 2
        )
    )(jnp.arange(4))
    np.testing.assert_allclose(got, ref, rtol=1e-4)


def test_the_digits_classifier_takes_the_weights_its_members_are_evaluated_with():
    from jaxes_examples.digits import classifier

    with pytest.raises(ValueError, match=r"^weights: expected one of float32, bfloat16, int8"):
        classifier.Config("x", hidden=(8,), noise="lowrank", weights="int4")
    with pytest.raises(ValueError, match=r"^weights: 'int8' members are evaluated factored"):
        classifier.Config("x", hidden=(8,), weights="int8")
    config = classifier.Config("x", hidden=(8,), noise="lowrank", weights="int8")
    params = {"Dense_0": {"kernel": jnp.ones((64, 8)), "bias": jnp.zeros(8)}}
    deployed = classifier.deployed(config, params)
    assert int8.is_int8(deployed["Dense_0"]["kernel"])
    assert deployed["Dense_0"]["bias"].dtype == jnp.float32
