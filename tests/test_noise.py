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


@pytest.mark.parametrize("size, block", [(64, 8), (10, 5)], ids=["one-window", "two-blocks"])
def test_table_windows_start_at_uniform_key_derived_offsets(size, block):
    # 8 coordinates: one window of 8 from a table of 64 (57 possible offsets), or two blocks
    # of 5 from a table of 10 (6 offsets each; the second block's last 2 entries unused).
    like = {"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)}
    n = 20_000
    recipe = noise.Perturbations(noise.noise_table(size), 2 * n, True)
    table = recipe.source.init(jax.random.key(0), like)
    eps = jax.jit(jax.vmap(lambda j: recipe.base(table, jax.random.key(1), j, like)))(jnp.arange(n))
    flat = np.concatenate([np.reshape(x, (n, -1)) for x in jax.tree.leaves(eps)], axis=1)
    values = np.asarray(table.values)
    assert np.unique(values).size == size  # so a value names its position in the table
    position = {float(v): k for k, v in enumerate(values)}
    blocks = -(-flat.shape[1] // block)
    offsets = np.empty((n, blocks), int)
    for b in range(blocks):
        part = flat[:, b * block : (b + 1) * block]
        offsets[:, b] = [position[float(v)] for v in part[:, 0]]
        # Each block is the table's own window at that offset.
        window = offsets[:, b, None] + np.arange(part.shape[1])
        assert window.max() < size
        np.testing.assert_array_equal(part, values[window])
    # Every offset 0 .. size - block (the last window included) is drawn equally often, and
    # the blocks of one perturbation draw theirs independently: a chi-square test over the
    # joint cells, against its mean (cells - 1) plus 6 of its standard deviations.
    cells = (size - block + 1) ** blocks
    joint = np.ravel_multi_index(offsets.T, (size - block + 1,) * blocks)
    counts = np.bincount(joint, minlength=cells)
    assert counts.size == cells and counts.min() > 0
    expected = n / cells
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < (cells - 1) + 6 * np.sqrt(2 * (cells - 1)), chi2


def test_noise_key_uses_every_word_of_any_key():
    threefry = jax.random.key(5)
    assert noise.noise_key(threefry) is threefry  # passes through unchanged
    raw = jnp.array([1, 2, 3, 4], jnp.uint32)  # e.g. an rbg key's data

    def data(key):
        assert str(jax.random.key_impl(key)) == "threefry2x32" and key.shape == ()
        return tuple(np.asarray(jax.random.key_data(key)).tolist())

    mapped = data(noise.noise_key(raw))
    assert mapped == data(jax.jit(noise.noise_key)(raw))  # the same words, the same key
    # Changing any one word changes the key.
    others = {data(noise.noise_key(raw.at[w].add(1))) for w in range(4)}
    assert len(others | {mapped}) == 5
    typed = jax.random.wrap_key_data(raw, impl="rbg")
    assert data(noise.noise_key(typed)) == mapped  # a typed key maps like its own data
    assert data(noise.noise_key(raw[:2])) == (1, 2)  # two words are threefry data already


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
