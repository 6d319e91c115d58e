"""jaxes: JAX-native evolution strategies.

Example:
  >>> import jax, jax.numpy as jnp, jaxes
  >>> es = jaxes.open_es(population_size=16, sigma=0.1, learning_rate=0.05)
  >>> state = es.init(jax.random.key(0), jnp.ones(4))
  >>> population, state = es.ask(jax.random.key(1), state)
  >>> state, info = es.tell(state, -jnp.sum(population**2, axis=1))
  >>> int(state.generation)
  1
"""

from jaxes import centroid, evaluation, noise, shaping, testing
from jaxes.centroid import PopulationMoments, classical_estimator, displacement_update
from jaxes.evaluation import evaluate
from jaxes.noise import NoiseSource, Perturbations
from jaxes.shaping import centered_rank, raw, z_score
from jaxes.strategies import (
    OpenESInfo,
    OpenESState,
    StrategyInfo,
    ars,
    centre,
    open_es,
    pgpe,
    sep_cma_es,
    snes,
)
from jaxes.types import Strategy

__version__ = "0.1.0"

__all__ = [
    "NoiseSource",
    "OpenESInfo",
    "OpenESState",
    "Perturbations",
    "PopulationMoments",
    "Strategy",
    "StrategyInfo",
    "ars",
    "centered_rank",
    "centre",
    "centroid",
    "classical_estimator",
    "displacement_update",
    "evaluate",
    "evaluation",
    "noise",
    "open_es",
    "pgpe",
    "raw",
    "sep_cma_es",
    "shaping",
    "snes",
    "testing",
    "z_score",
]
