"""The public types every strategy shares: its diagnostics (``StrategyInfo``) and what
``estimate`` learnt (``EstimateStats``); the state's are in ``jaxes.strategies.state``
(``BestMember`` and ``centre`` are re-exported here)."""

from __future__ import annotations

from typing import NamedTuple

import jax

from jaxes import centroid
from jaxes.strategies.state import BestMember, centre

__all__ = ["BestMember", "EstimateStats", "StrategyInfo", "TerminationInfo", "centre"]


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


class TerminationInfo(NamedTuple):
    """The CMA family's record in ``StrategyInfo.termination`` (``cma_es``, ``xnes``): one bool
    per pycma termination criterion (``termination``'s table), ``stop`` (any of them) and
    ``condition``, the condition number of the covariance."""

    tolfun: jax.Array
    tolx: jax.Array
    tolupsigma: jax.Array
    conditioncov: jax.Array
    noeffectaxis: jax.Array
    noeffectcoord: jax.Array
    stagnation: jax.Array
    flat_fitness: jax.Array
    stop: jax.Array
    condition: jax.Array


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
      termination: the CMA family's termination criteria (``TerminationInfo``; ``None`` for
        the other strategies). Its fields read as the info's own too (``info.stop``), and
        ``metrics.jsonl`` has a column for each.
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
    termination: TerminationInfo | None = None

    def __getattr__(self, name: str):
        # Only for names that are no field: the termination record's, read as the info's own
        # (``info.stop``, ``info.tolfun``), as they were before it was a sub-record.
        record = self.termination
        if record is not None and name in TerminationInfo._fields:
            return getattr(record, name)
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")
