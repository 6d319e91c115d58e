import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import noise

LIKE = {"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)}
P = 8


def recipes():
    for source in (noise.gaussian(), noise.gaussian_together(P), noise.noise_table(64)):
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


def numbered_table(size: int) -> noise.Table:
    """A table whose value at position k is k, so a window names its offset."""
    return noise.Table(jnp.arange(size, dtype=jnp.float32))


@functools.cache
def sample_windows(size: int, dim: int):
    """One compile per table layout: base ``j`` is traced, so every base reuses it."""
    like = jnp.zeros(dim)
    source = noise.noise_table(size)
    sample = jax.vmap(lambda k, j: source.sample(numbered_table(size), k, j, like), (0, None))
    return jax.jit(sample)


def window_offsets(size: int, dim: int, keys, j) -> np.ndarray:
    """``(len(keys), blocks)`` start offsets of base ``j``'s blocks, one row per key, checking
    on the way that every block is its table window."""
    block, _ = noise.table_layout(size, dim)
    eps = np.asarray(sample_windows(size, dim)(keys, j)).astype(int)
    starts = eps[:, ::block]
    for b in range(starts.shape[1]):
        part = eps[:, b * block : (b + 1) * block]
        np.testing.assert_array_equal(part, starts[:, b, None] + np.arange(part.shape[1]))
    return starts


@pytest.mark.parametrize("size, dim", [(64, 8), (10, 8)], ids=["one-window", "two-blocks"])
def test_table_windows_start_at_uniform_independent_offsets(size, dim):
    # 8 coordinates: one window of 8 from a table of 64 (32 window starts, a power of two), or
    # two blocks of 5 from a table of 10 (4 starts each; the second block's last 2 unused).
    block, windows = noise.table_layout(size, dim)
    n = 20_000
    keys = jax.random.split(jax.random.key(1), n)
    for j in (0, 5):  # any base, over populations (keys)
        offsets = window_offsets(size, dim, keys, j)
        assert offsets.max() < windows and offsets.max() + block <= size
        # Every start 0 .. W - 1 is drawn equally often and the blocks of one perturbation
        # draw theirs independently: a chi-square test over the joint cells, against its
        # mean (cells - 1) plus 6 of its standard deviations.
        cells = windows ** offsets.shape[1]
        counts = np.bincount(np.ravel_multi_index(offsets.T, offsets.shape[1] * (windows,)))
        assert counts.size == cells and counts.min() > 0
        chi2 = np.sum((counts - n / cells) ** 2 / (n / cells))
        assert chi2 < (cells - 1) + 6 * np.sqrt(2 * (cells - 1)), chi2


@pytest.mark.parametrize("size, dim", [(64, 8), (10, 8)], ids=["one-window", "two-blocks"])
def test_no_two_bases_of_a_population_read_the_same_window(size, dim):
    _, windows = noise.table_layout(size, dim)
    for seed in range(5):
        key = jax.random.key(seed)
        rows = np.stack([window_offsets(size, dim, key[None], j)[0] for j in range(windows)])
        for b in range(rows.shape[1]):  # in each block, the W bases take the W starts
            assert sorted(rows[:, b]) == list(range(windows))


def test_the_default_table_is_sized_to_the_problem():
    for dim, bases in ((10, 8), (3000, 128), (10, 2**17), (100_000, 8)):
        source = noise.noise_table(bases=bases)
        size = source.init(jax.random.key(0), jnp.zeros(dim)).values.size
        block, windows = noise.table_layout(size, dim)
        assert block == dim and windows >= max(2 * dim, bases, 2**16)
        assert size == windows + dim - 1 < 2 * max(2 * dim, bases, 2**16) + dim
    assert noise.table_size(10**9) == 2**24  # the largest


def test_a_table_is_the_same_eagerly_and_in_jit():
    source = noise.noise_table(bases=8)
    eager = source.init(jax.random.key(3), jnp.zeros(300)).values
    jitted = jax.jit(source.init)(jax.random.key(3), jnp.zeros(300)).values
    np.testing.assert_array_equal(eager, jitted)


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
        # The default: one window per member, from a table of 2^16 + 4095 floats.
        (noise.noise_table(bases=256), noise.table_size(4096, 256), 4096, 256),
        # Two blocks of 2^19 per member from a table of 2^20 (the smallest explicit table).
        (noise.noise_table(2**20), 2**20, 2**20, 64),
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
    with pytest.raises(ValueError, match=r"^size: expected an int >= 2"):
        noise.noise_table(1)
    with pytest.raises(ValueError, match=r"noise_table: a table of 5 floats .* >= 20"):
        jaxes.open_es(4, noise=jaxes.noise.noise_table(5)).init(jax.random.key(0), jnp.zeros(10))
    with pytest.raises(ValueError, match="key: expected one PRNG key"):
        noise.noise_key(jnp.zeros(2, jnp.float32))


@pytest.mark.parametrize(
    "params, match",
    [({}, "empty"), ({"a": jnp.arange(3)}, r"\['a'\].*int32"), ([], "empty")],
)
def test_bad_params(params, match):
    with pytest.raises(ValueError, match=match):
        jaxes.open_es(4).init(jax.random.key(0), params)
