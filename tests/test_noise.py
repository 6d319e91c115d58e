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
    rows, _ = recipe.moments(state, key, LIKE, 1.0, jnp.eye(P))
    rebuilt = jax.tree.map(lambda *r: jnp.stack(r), *rows)
    for a, b in zip(jax.tree.leaves(rebuilt), jax.tree.leaves(population), strict=True):
        np.testing.assert_array_equal(a, b)
    for i in range(P):
        member = recipe.member(state, key, i, LIKE, 1.0)
        for a, b in zip(jax.tree.leaves(member), jax.tree.leaves(population), strict=True):
            np.testing.assert_array_equal(a, b[i])


def test_antithetic_members_come_in_signed_pairs():
    recipe = noise.Perturbations(noise.noise_table(), P, True)
    table = recipe.source.init(jax.random.key(0), LIKE)
    pop = recipe.population(table, jax.random.key(1), LIKE, 1.0)
    np.testing.assert_array_equal(pop["w"][0::2], -pop["w"][1::2])
    assert float(jnp.min(jnp.abs(pop["w"][0] - pop["w"][2]))) > 0  # pairs differ


def test_table_blocks_are_slices_of_the_table():
    # 50 floats, 8 parameters: one block (a window of 8).  20 floats: blocks of 10 > 8 -> one.
    # 10 floats: blocks of 5, so the 8 parameters read two windows at their own offsets.
    for size, block in ((50, 8), (10, 5)):
        recipe = noise.Perturbations(noise.noise_table(size), 4, True)
        table = np.asarray(recipe.source.init(jax.random.key(0), LIKE).values)
        eps = recipe.base(recipe.source.init(jax.random.key(0), LIKE), jax.random.key(2), 0, LIKE)
        flat = np.concatenate([np.ravel(x) for x in jax.tree.leaves(eps)])
        windows = np.lib.stride_tricks.sliding_window_view(table, block)
        for start in range(0, flat.size, block):
            part = flat[start : start + block]
            assert np.any(np.all(windows[:, : part.size] == part, axis=1))


def first_two_moments(eps: np.ndarray, table_size: int | None):
    """Mean, variance and the largest member-member and coordinate-coordinate correlations of
    ``eps`` (bases × coordinates), with the standard errors they are compared against."""
    n, d = eps.shape
    # A finite table's own sample mean and variance are shared by every window.
    count = n * d if table_size is None else min(n * d, table_size)
    member_r = np.corrcoef(eps)[np.triu_indices(n, 1)]
    coord_r = np.corrcoef(eps[:, :: max(1, d // 128)].T)
    coord_r = coord_r[np.triu_indices(coord_r.shape[0], 1)]
    return {
        "mean": (eps.mean(), 1 / np.sqrt(count)),
        "variance - 1": (eps.var() - 1, np.sqrt(2 / count)),
        "member correlation": (np.abs(member_r).max(), 1 / np.sqrt(d)),
        "coordinate correlation": (np.abs(coord_r).max(), 1 / np.sqrt(n)),
    }


@pytest.mark.parametrize(
    "source, table_size, dim, bases",
    [
        (noise.noise_table(), 2**24, 4096, 256),  # the default: one window per member
        # Two blocks of 2^17 per member. Two blocks coincide with probability 1/(2^17 + 1) per
        # pair, so few bases keep that (a real, table-size-bound correlation) out of the test.
        (noise.noise_table(2**18), 2**18, 2**18, 64),
        (noise.gaussian(), None, 4096, 256),
    ],
    ids=["default-table", "table-blocks", "gaussian"],
)
def test_noise_has_the_first_two_moments_of_a_standard_normal(source, table_size, dim, bases):
    like = jnp.zeros(dim)
    recipe = noise.Perturbations(source, 2 * bases, True)
    state = source.init(jax.random.key(0), like)
    eps = np.asarray(jax.jit(lambda s: recipe.population(s, jax.random.key(1), like, 1.0))(state))
    stats = first_two_moments(eps[0::2], table_size)  # the independent bases
    # Each statistic within 5.5 standard errors (the correlations: of the largest of up to
    # ~33k pairs, which a N(0, 1) sample exceeds with probability < 1e-3).
    for name, (value, se) in stats.items():
        assert abs(value) < 5.5 * se, f"{name}: {value:.3g} vs standard error {se:.3g}"


def test_noise_keys_do_not_depend_on_the_prng_implementation():
    like = {"w": jnp.zeros((3, 2))}
    recipe = noise.Perturbations(noise.gaussian(), P, True)
    for impl in ("threefry2x32", "rbg", "unsafe_rbg"):
        key = jax.random.key(7, impl=impl)
        rows = recipe.population(None, key, like, 1.0)["w"]
        single = jax.vmap(lambda i, k=key: recipe.member(None, k, i, like, 1.0))(jnp.arange(P))
        np.testing.assert_array_equal(single["w"], rows)
        for i in (0, 5):
            np.testing.assert_array_equal(recipe.member(None, key, i, like, 1.0)["w"], rows[i])
    raw = jax.random.key_data(jax.random.key(7, impl="rbg"))  # raw uint32 words
    typed = recipe.population(None, jax.random.key(7, impl="rbg"), like, 1.0)["w"]
    np.testing.assert_array_equal(recipe.population(None, raw, like, 1.0)["w"], typed)


def test_noise_is_gaussian():
    eps = noise.gaussian().sample(None, jax.random.key(0), jnp.zeros(100_000))
    assert abs(float(jnp.mean(eps))) < 0.02 and abs(float(jnp.std(eps)) - 1) < 0.02


def test_bad_noise_settings():
    with pytest.raises(ValueError, match="noise_table_size"):
        noise.noise_table(1)
    with pytest.raises(ValueError, match="key: expected a PRNG key"):
        noise.noise_key(jnp.zeros(2, jnp.float32))


@pytest.mark.parametrize(
    "params, match",
    [({}, "empty"), ({"a": jnp.arange(3)}, r"\['a'\].*int32"), ([], "empty")],
)
def test_bad_params(params, match):
    with pytest.raises(ValueError, match=match):
        jaxes.open_es(4).init(jax.random.key(0), params)
