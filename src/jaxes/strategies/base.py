"""The public types every strategy shares: its diagnostics (``StrategyInfo``), what
``estimate`` learnt (``EstimateStats``), the best member's recipe (``BestMember``), the
state's shared fields (``strategy_state``) and ``centre``, θ in the params' own dtypes."""

from __future__ import annotations

from typing import NamedTuple

import jax

from jaxes import centroid, trees


class EstimateStats(NamedTuple):
    """What ``estimate`` learnt about the population besides the direction.

    Attributes:
      weights: ``(P,)`` shaped fitness.
      masses: ``(P,)`` non-negative masses (``weights - min(weights)``, or the recombination
        weights themselves for CMA-ES).
      moments: the population's ``centroid.PopulationMoments`` (from regenerated noise).
      sigma: the perturbation scale of this population (scalar or per-coordinate pytree).
    """

    weights: jax.Array
    masses: jax.Array
    moments: centroid.PopulationMoments
    sigma: object


class StrategyInfo(NamedTuple):
    """Per-generation diagnostics every strategy reports (fitness maximised; statistics over
    finite members), so logs and ``metrics.jsonl`` have the same columns for every strategy.
    Every field is a scalar: a ``lax.scan`` over generations stacks no parameter-sized array.

    Attributes:
      fitness_mean, fitness_max, fitness_min: over this generation's finite fitness values.
      best_fitness: the best member's fitness seen so far (``strategy.best_params(state)``
        rebuilds it).
      num_finite: how many of this generation's fitness values were finite.
      applied: whether the update was applied. False when the fitness carried no ranking
        (fewer than two distinct finite values: all equal, or all NaN), which leaves every
        strategy's search state as it was, and when ``tell`` had no pending ``ask``.
      update_norm: ``‖θ' - θ‖``, the norm of the step taken (0 when not applied).
      com_displacement_norm: ``‖M - θ‖`` (reward-weighted centre of mass from the model).
      centroid_offset_norm: ``‖c - θ‖`` (plain centroid; 0 with float32 antithetic pairs).
      total_mass: ``Σ m_i``.
      sigma: the mean perturbation scale over coordinates.
    """

    fitness_mean: jax.Array
    fitness_max: jax.Array
    fitness_min: jax.Array
    best_fitness: jax.Array
    num_finite: jax.Array
    applied: jax.Array
    update_norm: jax.Array
    com_displacement_norm: jax.Array
    centroid_offset_norm: jax.Array
    total_mass: jax.Array
    sigma: jax.Array


class BestMember(NamedTuple):
    """How to rebuild the best member seen so far, without storing it.

    Attributes:
      key: the ``ask`` key of its population, as raw threefry key data (``uint32[2]``).
      index: its index in that population.
      centre: θ of that population (``None`` with ``track_best=False``).
      scale: the perturbation scale of that population (``None`` with ``track_best=False``).
    """

    key: jax.Array
    index: jax.Array
    centre: object
    scale: object


def centre(state):
    """θ in the dtypes the params were given in (the master copy is float32).

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> state = jaxes.open_es(4).init(jax.random.key(0), jnp.ones(2, jnp.bfloat16))
      >>> state.params.dtype, centre(state).dtype
      (dtype('float32'), dtype(bfloat16))
    """
    return trees.cast_like(state.params, state.dtypes)


# Every strategy's state has these fields, its own between them, in this order (the order is
# the pytree's, so checkpoints and donated buffers see the same layout in every strategy).
_LEADING = (
    ("params", "the mean θ (the master copy: float32, or float64 for float64 params)."),
    ("dtypes", "one scalar per leaf in the dtype members are built in (the params' own)."),
)
_TRAILING = (
    ("key", "the key of the latest ``ask`` (threefry); the noise is rebuilt from it."),
    ("generation", "how many ``tell`` calls have updated the state."),
    ("noise_state", "the noise table (``None`` where the source keeps none)."),
    ("pending", "an ``ask`` awaits its ``tell``."),
    ("fitness", "the fitness last told (``(P,)``, NaN before any)."),
    ("best_fitness", "the best member's fitness (``-inf`` before the first ``tell``)."),
    ("best", "how to rebuild the best member (``strategy.best_params(state)``)."),
)
SHARED_FIELDS = tuple(field for field, _ in (*_LEADING, *_TRAILING))


def strategy_state(cls: type) -> type:
    """A strategy state class, checked: a NamedTuple whose fields are the shared ones
    (``SHARED_FIELDS``) around its own, in that order (the pytree's order, so checkpoints and
    donated buffers see the same layout in every strategy). The shared fields' descriptions
    are added to its docstring.

    Example:
      >>> from typing import Any, NamedTuple
      >>> @strategy_state
      ... class MyState(NamedTuple):
      ...     params: Any
      ...     dtypes: Any
      ...     sigma: float
      ...     key: Any
      ...     generation: Any
      ...     noise_state: Any
      ...     pending: Any
      ...     fitness: Any
      ...     best_fitness: Any
      ...     best: BestMember
      >>> MyState._fields[:3]
      ('params', 'dtypes', 'sigma')
      >>> @strategy_state
      ... class Broken(NamedTuple):
      ...     params: Any
      ...     sigma: float
      Traceback (most recent call last):
        ...
      TypeError: Broken: a strategy state's fields are params, dtypes, <its own>, key, generation, noise_state, pending, fitness, best_fitness, best; got params, sigma
    """  # noqa: E501
    leading = [field for field, _ in _LEADING]
    trailing = [field for field, _ in _TRAILING]
    fields = list(cls._fields)
    own = fields[len(leading) : len(fields) - len(trailing)]
    if fields != [*leading, *own, *trailing] or set(own) & {*leading, *trailing}:
        raise TypeError(
            f"{cls.__name__}: a strategy state's fields are {', '.join(leading)}, <its own>, "
            f"{', '.join(trailing)}; got {', '.join(fields)}"
        )
    shared = "\n".join(f"      {field}: {text}" for field, text in (*_LEADING, *_TRAILING))
    cls.__doc__ = f"{cls.__doc__.rstrip()}\n\n    Fields every strategy state has:\n{shared}\n    "
    return cls
