"""The GA with its parents kept as seed lists (``jaxes.ga(..., lineage=G)``, Such et al. 2017's
encoding, issue 62): it runs the default GA's trajectory, its state holds two copies of θ
(θ and θ₀) whatever ``T``, it stops updating at ``G`` and says so, and it checkpoints."""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_states_identical

import jaxes
from jaxes.strategies.lineage import SeedLists
from jaxes.training import checkpoint

PARAMS = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.full(4, 0.5)}
P, T, G = 12, 3, 10
F32 = float(jnp.finfo(jnp.float32).eps)


def fitness_fn(x):
    return -jnp.sum(jnp.square(x["w"] - 0.3)) - jnp.sum(jnp.square(x["b"] + 1.0))


def rebuilt_parents(es_noise: str, state):
    """The ``T`` parents a seed-list state describes, rebuilt as its ``ask`` rebuilds them."""
    source = {"gaussian": jaxes.noise.gaussian(), "table": jaxes.noise.noise_table()}[es_noise]
    perturbations = jaxes.noise.Perturbations(source, P, antithetic=False)
    return SeedLists(perturbations, T, G).parents(state, state.lineages)


def row(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def close(a, b, tol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=tol)


@pytest.mark.parametrize("noise", ["gaussian", "table"])
def test_seed_lists_run_the_materialised_trajectory_and_stop_at_g(noise):
    stored = jaxes.ga(P, 0.2, truncation=T, noise=noise)
    seeds = jaxes.ga(P, 0.2, truncation=T, noise=noise, lineage=G)
    a, b = stored.init(jax.random.key(0), PARAMS), seeds.init(jax.random.key(0), PARAMS)
    assert type(b).__name__ == "GASeedState" and int(b.records.count) == 0
    steps = [(jax.jit(es.ask), jax.jit(es.tell)) for es in (stored, seeds)]
    for g in range(G + 1):
        key = jax.random.key(30 + g)  # keys whose fitness has no near-ties
        (pa, a), (pb, b) = steps[0][0](key, a), steps[1][0](key, b)
        # A parent is θ₀ plus at most g mutations, rebuilt by the calls that made it, in their
        # order, each sum rounded once: were a rebuilt sum rounded otherwise (XLA fusing the
        # loop's body into an FMA, say), at most one ulp of the largest entry per mutation.
        tol = (g + 1) * F32 * max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(pa))
        close(pa, pb, tol)
        fa, fb = jax.vmap(fitness_fn)(pa), jax.vmap(fitness_fn)(pb)
        # No near-ties: members tol apart per entry differ in fitness by at most tol times
        # Σ|∂f/∂x|, so fitness gaps above twice that keep the ranks exact.
        grads = jax.vmap(jax.grad(fitness_fn))(pa)
        slope = float(
            jnp.max(sum(jnp.abs(x).reshape(P, -1).sum(1) for x in jax.tree.leaves(grads)))
        )
        assert float(jnp.min(jnp.diff(jnp.sort(fa)))) > 2 * tol * slope
        np.testing.assert_array_equal(jnp.argsort(-fa), jnp.argsort(-fb))
        before = (b.params, b.lineages, b.records)
        best_before = float(b.best_fitness)
        (a, ia), (b, ib) = steps[0][1](a, fa), steps[1][1](b, fb)
        assert bool(ia.applied)
        if g < G:
            assert bool(ib.applied) and int(b.records.count) == g + 1
            close(b.params, a.params, tol)
            close(rebuilt_parents(noise, b), a.parents, tol)
            for field in ("update_norm", "com_displacement_norm", "best_fitness", "sigma"):
                np.testing.assert_allclose(getattr(ib, field), getattr(ia, field), rtol=1e-5)
            assert np.all(np.asarray(b.lineages.length) <= g + 1)  # the elite's copies add none
            continue
        # The (G + 1)-th tell: nothing applied, and the info says so; the best still tracked.
        assert not bool(ib.applied) and float(ib.update_norm) == 0.0
        assert int(b.records.count) == G and int(b.generation) == G + 1
        after = (b.params, b.lineages, b.records)
        for x, y in zip(jax.tree.leaves(after), jax.tree.leaves(before), strict=True):
            np.testing.assert_array_equal(x, y)
        assert float(b.best_fitness) == max(float(jnp.max(fb)), best_before)
        close(seeds.best_params(b), stored.best_params(a), tol)


def test_members_alone_in_chunks_and_the_best_rebuild_from_the_seed_lists():
    es = jaxes.ga(P, 0.2, truncation=T, lineage=G)
    state = es.init(jax.random.key(0), PARAMS)
    ask, tell = jax.jit(es.ask), jax.jit(es.tell)
    best, best_fitness = None, -jnp.inf
    for g in range(4):
        population, state = ask(jax.random.key(g), state)
        fitness = jax.vmap(fitness_fn)(population)
        if float(jnp.max(fitness)) > best_fitness:
            best = row(population, int(jnp.argmax(fitness)))
            best_fitness = float(jnp.max(fitness))
        if g < 3:
            state, _ = tell(state, fitness)
    tol = 4 * F32 * 2.0
    for i in (0, 1, 7, P - 1):
        close(jax.jit(es.member)(state, i), row(population, i), tol)
    close(es.members(state, 4, 4), jax.tree.map(lambda x: x[4:8], population), tol)
    state, _ = tell(state, fitness)
    close(es.best_params(state), best, tol)
    assert float(fitness_fn(es.best_params(state))) == pytest.approx(best_fitness, rel=1e-6)


def test_an_uninformative_tell_fills_no_record():
    es = jaxes.ga(P, 0.2, truncation=T, lineage=2)
    state = es.init(jax.random.key(0), PARAMS)
    _, state = es.ask(jax.random.key(1), state)
    state, info = es.tell(state, jnp.zeros(P))  # all equal: no ranking, no update
    assert not bool(info.applied) and int(state.records.count) == 0
    for g in range(3):
        population, state = es.ask(jax.random.key(2 + g), state)
        state, info = es.tell(state, jax.vmap(fitness_fn)(population))
        assert bool(info.applied) == (g < 2) and int(state.records.count) == min(g + 1, 2)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_a_bad_lineage_is_one_line(bad):
    with pytest.raises(ValueError, match=r"^lineage: expected an int >= 1, got "):
        jaxes.ga(8, lineage=bad)


def state_bytes(es, d: int) -> int:
    """The bytes of ``es``'s state for ``d`` float32 parameters (traced, never allocated)."""
    shapes = jax.eval_shape(lambda: es.init(jax.random.key(0), jnp.zeros(d)))
    total = 0
    for x in jax.tree.leaves(shapes):
        size = math.prod(x.shape)
        total += (
            8 * size
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
            else (x.dtype.itemsize * size)
        )
    return total


@pytest.mark.parametrize("track_best", [False, True])
def test_the_seed_list_state_holds_theta_and_theta0_whatever_t(track_best):
    # d = 10⁶, T = 8, G = 100: θ and θ₀ (and the best member's θ with track_best), plus the
    # lineages and records, the same bytes at d = 10³: nothing else grows with d.
    t, g, copies = 8, 100, 3 if track_best else 2
    seeds = jaxes.ga(64, truncation=t, noise="gaussian", track_best=track_best, lineage=g)
    stored = jaxes.ga(64, truncation=t, noise="gaussian", track_best=track_best)
    small = {d: state_bytes(seeds, d) - copies * 4 * d for d in (10**3, 10**6)}
    assert small[10**3] == small[10**6] < 16 * 1024
    lineages = (8 * t * g + 4 * t) * (2 if track_best else 1) + 12 * g  # pairs, lengths, records
    assert lineages <= small[10**6] < lineages + 1024
    # The parents as parameters: T + 1 copies (2 T + 2 with the best member's recipe).
    d = 10**6
    assert state_bytes(stored, d) - (t + 1) * (2 if track_best else 1) * 4 * d < 1024


def test_a_seed_list_state_checkpoints_and_resumes_bit_identically(tmp_path):
    es = jaxes.ga(P, 0.2, truncation=T, lineage=G)
    ask, tell = jax.jit(es.ask), jax.jit(es.tell)

    def run(state, first, last):
        for g in range(first, last):
            population, state = ask(jax.random.key(g), state)
            state, _ = tell(state, jax.vmap(fitness_fn)(population))
        return state

    fresh = es.init(jax.random.key(0), PARAMS)
    middle = run(fresh, 0, 4)
    saver = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
    saver.save(4, middle)
    step, restored = saver.restore(es.init(jax.random.key(0), PARAMS))
    saver.close()
    assert step == 4 and jax.tree.structure(restored) == jax.tree.structure(middle)
    assert_states_identical(run(middle, 4, 6), run(restored, 4, 6))


def _train_ga(out, resume=False, **settings):
    from jaxes.app import train
    from jaxes.app.config import TrainConfig

    settings = {"devices": 1, "eval_every": 10, "checkpoint_every": 10, **settings}
    config = TrainConfig.make(env="fast", strategy="ga", **settings)
    with open(os.devnull, "w") as quiet:
        train.train_config(config, str(out), resume=resume, stream=quiet, plot=False)
    return train.load_run(str(out))[-1].strategy_state


def test_jaxes_train_lineage_runs_the_default_gas_run_resumes_and_splits(tmp_path):
    """``jaxes train --strategy ga --lineage G``: the seed lists end where the parameters do,
    a run stopped at 10 and resumed to 20 is the whole run bit for bit, and two devices end
    where one does."""
    plain = _train_ga(tmp_path / "plain", generations=20)
    seeds = _train_ga(tmp_path / "seeds", generations=20, lineage=20)
    assert type(seeds).__name__ == "GASeedState" and int(seeds.records.count) == 20
    assert_states_identical(plain.params, seeds.params)
    _train_ga(tmp_path / "split", generations=10, lineage=20)
    assert_states_identical(seeds, _train_ga(tmp_path / "split", True, generations=20, lineage=20))
    two = _train_ga(tmp_path / "two", generations=20, lineage=20, devices=2)
    assert_states_identical(seeds.params, two.params)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"lineage": 10}, r"^lineage: ga keeps seed lists of at most 10 generations .* >= 20,"),
        ({"lineage": 0}, r"^lineage: expected an int >= 1 \(or unset\), got 0"),
        ({"lineage": 20, "strategy": "snes"}, r"^lineage: snes has no lineage setting; .*\['ga'\]"),
    ],
)
def test_a_lineage_jaxes_train_cannot_honour_is_refused_naming_it(settings, message):
    from jaxes.app.checks import ConfigError
    from jaxes.app.config import TrainConfig

    with pytest.raises(ConfigError, match=message):
        TrainConfig.make(**{"env": "fast", "strategy": "ga", "generations": 20, **settings})
