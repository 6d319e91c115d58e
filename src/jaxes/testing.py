"""Assertions to call from your own pytest: does a strategy do what its maths says?

Each function runs the strategy on *your* params and fitness and raises ``AssertionError``
with the largest discrepancy when a property fails. They need a strategy whose ``estimate``
stats carry ``weights``, ``masses``, ``moments`` and ``sigma`` (every jaxes strategy).

Not every property holds for every strategy; a check asked of a strategy it does not apply to
(known from ``strategy.traits``) raises ``ValueError`` saying why:

=================================== =======  ====  ====  ===  ==========  ======  ====  =========
check                               open_es  pgpe  snes  ars  sep_cma_es  cma_es  xnes  cr_fm_nes
=================================== =======  ====  ====  ===  ==========  ======  ====  =========
assert_update_matches_classical     yes      no    no    no   no          no      no    no
assert_moments_match_population     yes      yes   yes   yes  yes         yes     yes   yes
assert_shift_and_scale_invariant    yes¹     yes¹  yes¹  yes  yes         yes     yes   yes
assert_monotone_invariant           yes²     yes²  yes²  no   yes         yes     yes   yes
assert_antithetic_centroid_on_model yes³     yes³  yes³  yes  no          no      no    yes
assert_members_rebuilt              yes      yes   yes   yes  yes         yes     yes   yes
=================================== =======  ====  ====  ===  ==========  ======  ====  =========

¹ with ``scale=None`` under ``fitness_shaping="raw"``; ² with a rank shaping (the defaults);
³ with antithetic pairs (snes: ``antithetic=True``).
``guided_es`` takes every check but ``assert_update_matches_classical`` (¹ and ² as
open_es's); ``ga`` every check but that one and ``assert_antithetic_centroid_on_model``
(it draws no pairs).

Example:
  >>> import jax, jax.numpy as jnp, jaxes
  >>> es = jaxes.open_es(population_size=16, sigma=0.1)
  >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
  >>> fitness_fn = lambda p: -jnp.sum(p["w"] ** 2) - jnp.sum(p["b"] ** 2)
  >>> assert_update_matches_classical(es, params, fitness_fn, jax.random.key(0))
  >>> assert_shift_and_scale_invariant(es, params, fitness_fn, jax.random.key(0))
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxes import centroid, trees
from jaxes.types import Params, Strategy

FitnessArg = Callable[[Params], jax.Array] | jax.Array


def _refuse_unless(strategy: Strategy, check: str, holds: bool, why: str) -> None:
    if strategy.traits is not None and not holds:
        raise ValueError(f"strategy: {check} does not apply to {strategy.traits.name}: {why}")


def _sample(strategy: Strategy, params: Params, fitness: FitnessArg, key: jax.Array):
    init_key, ask_key = jax.random.split(key)
    state = strategy.init(init_key, params)
    population, state = strategy.ask(ask_key, state)
    values = jax.vmap(fitness)(population) if callable(fitness) else jnp.asarray(fitness)
    return state, population, values


def _close(
    name: str, actual: Params, expected: Params, rtol: float, atol: float, slack=None
) -> None:
    slacks = jax.tree.leaves(slack) if slack is not None else [0.0] * len(jax.tree.leaves(actual))
    for path, a, e, extra in zip(
        jax.tree_util.tree_leaves_with_path(actual),
        jax.tree.leaves(actual),
        jax.tree.leaves(expected),
        slacks,
        strict=True,
    ):
        a64, e64 = np.asarray(a, np.float64), np.asarray(e, np.float64)
        scale = atol + rtol * np.max(np.abs(e64), initial=0.0) + extra
        err = np.max(np.abs(a64 - e64), initial=0.0)
        if not err <= scale:
            raise AssertionError(
                f"{name}: leaf {jax.tree_util.keystr(path[0]) or '<root>'} differs by {err:.3g} "
                f"(allowed {scale:.3g})"
            )


def assert_update_matches_classical(
    strategy: Strategy,
    params: Params,
    fitness: FitnessArg,
    key: jax.Array,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> None:
    """The strategy's centroid direction equals ``(1/(Pσ)) Σ (w_i - w̄) ε_i``.

    This is OpenAI-ES's identity (``jaxes.open_es``: a scalar σ and the step
    ``(m̄/σ²)(M - c)``). Other strategies scale the displacement differently; check them with
    ``assert_moments_match_population`` and their own formulas (``tests/test_strategies.py``).
    ``ε_i`` is read back from the population the strategy actually returned
    (``(x_i - θ)/σ`` in float64), so this also checks that ``tell`` rebuilt the same noise.

    Args:
      strategy: a jaxes strategy.
      params: your parameter pytree.
      fitness: a per-member fitness function (maximised) or a ``(P,)`` array.
      key: PRNG key.
      rtol, atol: tolerance relative to the largest entry of the reference.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> es = jaxes.open_es(population_size=16, sigma=0.1)
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
      >>> fitness_fn = lambda p: -jnp.sum(p["w"] ** 2) - jnp.sum(p["b"] ** 2)
      >>> assert_update_matches_classical(es, params, fitness_fn, jax.random.key(0))
    """
    traits = strategy.traits
    _refuse_unless(
        strategy,
        "assert_update_matches_classical",
        traits is not None and traits.name == "open_es",
        "it checks open_es's identity (one scalar σ, direction (1/(Pσ)) Σ (w_i - w̄) ε_i) and "
        "this strategy scales its direction differently; use assert_moments_match_population",
    )
    state, population, values = _sample(strategy, params, fitness, key)
    direction, stats = strategy.estimate(state, values)
    sigma_leaves = jax.tree.leaves(stats.sigma)
    if len(sigma_leaves) != 1 or np.ndim(sigma_leaves[0]) != 0:
        raise ValueError(
            "strategy: assert_update_matches_classical needs a scalar σ (open_es); this "
            "strategy's σ is per coordinate, use assert_moments_match_population"
        )
    sigma = np.float64(stats.sigma)
    noise = jax.tree.map(
        lambda x, t: (np.asarray(x, np.float64) - np.asarray(t, np.float64)[None]) / sigma,
        population,
        state.params,
    )
    w = np.asarray(stats.weights, np.float64)
    w = w - w.mean()
    reference = jax.tree.map(lambda e: np.tensordot(w, e, axes=(0, 0)) / (len(w) * sigma), noise)

    # Members are stored in their leaf dtype, so ε read back from them carries a rounding error
    # of about eps(dtype) * |x| / σ per entry; allow what that can add up to.
    def rounding_slack(x):
        unit = float(jnp.finfo(x.dtype).eps) * float(np.max(np.abs(np.asarray(x, np.float64))))
        return 2.0 * np.sum(np.abs(w)) / (len(w) * sigma) * unit / sigma

    slack = jax.tree.map(rounding_slack, population)
    _close("centroid update vs classical estimator", direction, reference, rtol, atol, slack)


def assert_moments_match_population(
    strategy: Strategy, params: Params, fitness: FitnessArg, key: jax.Array, rtol: float = 2e-4
) -> None:
    """The centre-of-mass moments ``estimate`` rebuilt from keys equal those of the population
    ``ask`` returned: ``Σ m_i δ_i`` and ``Σ δ_i`` (and ``Σ m_i δ_i²``, ``Σ δ_i²`` where the
    strategy adapts σ), with ``δ_i = x_i - θ`` in float64. Works for every jaxes strategy.

    The tolerance is relative to the size of the summed terms (``Σ |m_i| |δ_i|``), since
    antithetic pairs cancel ``Σ δ_i`` to exactly zero.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> es = jaxes.snes(population_size=8, sigma=0.3)
      >>> assert_moments_match_population(
      ...     es, {"w": jnp.ones(3)}, lambda p: -jnp.sum(p["w"] ** 2), jax.random.key(0))
    """
    state, population, values = _sample(strategy, params, fitness, key)
    _, stats = strategy.estimate(state, values)
    m = np.asarray(stats.masses, np.float64)
    delta = jax.tree.map(
        lambda x, t: np.asarray(x, np.float64) - np.asarray(t, np.float64)[None],
        population,
        state.params,
    )
    moments = stats.moments

    def check(name, actual, coeffs, power):
        if actual is None:
            return
        for path, a, d in zip(
            jax.tree_util.tree_leaves_with_path(actual),
            jax.tree.leaves(actual),
            jax.tree.leaves(delta),
            strict=True,
        ):
            terms = d**power
            expected = np.tensordot(coeffs, terms, axes=(0, 0))
            size = np.max(np.tensordot(np.abs(coeffs), np.abs(terms), axes=(0, 0)), initial=0.0)
            err = np.max(np.abs(np.asarray(a, np.float64) - expected), initial=0.0)
            if not err <= rtol * max(size, 1e-30):
                raise AssertionError(
                    f"{name}: leaf {jax.tree_util.keystr(path[0]) or '<root>'} differs by "
                    f"{err:.3g} (terms of size {size:.3g})"
                )

    ones = np.ones_like(m)
    check("Σ m_i δ_i", moments.mass_moment, m, 1)
    check("Σ δ_i", moments.displacement_sum, ones, 1)
    check("Σ m_i δ_i²", moments.mass_square_moment, m, 2)
    check("Σ δ_i²", moments.square_sum, ones, 2)


def assert_shift_and_scale_invariant(
    strategy: Strategy,
    params: Params,
    fitness: FitnessArg,
    key: jax.Array,
    shift: float = 123.0,
    scale: float | None = 7.0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """``F -> F + shift`` (and ``F -> scale * F`` unless ``scale`` is None) leave the step alone.

    Pass ``scale=None`` for ``fitness_shaping="raw"``, whose step scales with fitness.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> es = jaxes.open_es(population_size=16, sigma=0.1, fitness_shaping="raw")
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
      >>> fitness = jnp.arange(16.0)  # a (P,) array instead of a function
      >>> assert_shift_and_scale_invariant(es, params, fitness, jax.random.key(0), scale=None)
    """
    state, _, values = _sample(strategy, params, fitness, key)
    base, _ = strategy.estimate(state, values)
    shifted, _ = strategy.estimate(state, values + shift)
    _close(f"step after F -> F + {shift}", shifted, base, rtol, atol)
    if scale is not None:
        scaled, _ = strategy.estimate(state, values * scale)
        _close(f"step after F -> {scale} * F", scaled, base, rtol, atol)


def assert_monotone_invariant(
    strategy: Strategy,
    params: Params,
    fitness: FitnessArg,
    key: jax.Array,
    transform: Callable[[jax.Array], jax.Array] = jnp.arctan,
) -> None:
    """A strictly increasing ``transform`` of fitness leaves a rank-shaped step unchanged.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> es = jaxes.open_es(population_size=16, sigma=0.1)  # centered ranks by default
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
      >>> fitness_fn = lambda p: -jnp.sum(p["w"] ** 2) - jnp.sum(p["b"] ** 2)
      >>> assert_monotone_invariant(es, params, fitness_fn, jax.random.key(0), jnp.exp)
    """
    _refuse_unless(
        strategy,
        "assert_monotone_invariant",
        strategy.traits is None or strategy.traits.rank_based is not False,
        "its update uses fitness values, not only their ranks (a rank shaping such as "
        "'centered_rank' makes open_es, pgpe and snes invariant; ars never is)",
    )
    state, _, values = _sample(strategy, params, fitness, key)
    base, _ = strategy.estimate(state, values)
    mapped, _ = strategy.estimate(state, transform(values))
    _close("step after a strictly increasing map of fitness", mapped, base, 0.0, 0.0)


def assert_antithetic_centroid_on_model(
    strategy: Strategy, params: Params, fitness: FitnessArg, key: jax.Array
) -> None:
    """With antithetic pairs the plain centroid sits exactly on the model (``‖c - θ‖ = 0``).

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> es = jaxes.open_es(population_size=16, sigma=0.1)  # antithetic pairs by default
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
      >>> fitness_fn = lambda p: -jnp.sum(p["w"] ** 2) - jnp.sum(p["b"] ** 2)
      >>> assert_antithetic_centroid_on_model(es, params, fitness_fn, jax.random.key(0))
    """
    _refuse_unless(
        strategy,
        "assert_antithetic_centroid_on_model",
        strategy.traits is None or strategy.traits.antithetic,
        "its members are drawn independently (no antithetic pairs), so the sampled centroid "
        "is off the model",
    )
    state, _, values = _sample(strategy, params, fitness, key)
    _, stats = strategy.estimate(state, values)
    offset = float(trees.tree_norm(centroid.plain_centroid(stats.moments)))
    if offset != 0.0:
        raise AssertionError(f"plain centroid is {offset:.3g} away from the model, expected 0")


def assert_members_rebuilt(strategy: Strategy, params: Params, key: jax.Array) -> None:
    """``member(state, i)`` is bit-identical to row ``i`` of ``ask``'s population, for every i.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> es = jaxes.open_es(population_size=16, sigma=0.1)
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
      >>> assert_members_rebuilt(es, params, jax.random.key(0))
    """
    init_key, ask_key = jax.random.split(key)
    state = strategy.init(init_key, params)
    population, state = strategy.ask(ask_key, state)
    rebuilt = jax.vmap(lambda i: strategy.member(state, i))(jnp.arange(strategy.population_size))
    _close("member(state, i) vs ask's population", rebuilt, population, 0.0, 0.0)


__all__ = [
    "assert_antithetic_centroid_on_model",
    "assert_members_rebuilt",
    "assert_moments_match_population",
    "assert_monotone_invariant",
    "assert_shift_and_scale_invariant",
    "assert_update_matches_classical",
    "centroid",
]
