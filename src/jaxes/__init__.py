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

import importlib.metadata

from jaxes import (  # noqa: F401 - modules as attributes: jaxes.noise, jaxes.testing, ...
    centroid,
    diagnostics,
    evaluation,
    factored,
    noise,
    shaping,
    subspace,
    testing,
    trees,
)
from jaxes.centroid import PopulationMoments, classical_estimator, displacement_update
from jaxes.evaluation import evaluate
from jaxes.noise import (
    NoiseSource,
    Perturbations,
    lowrank,  # noqa: F401 - jaxes.lowrank, as before the noise package
)
from jaxes.shaping import centered_rank, raw, z_score
from jaxes.strategies import (
    OpenESInfo,
    OpenESState,
    StrategyInfo,
    ars,
    centre,
    cma_es,
    open_es,
    pgpe,
    sep_cma_es,
    snes,
    xnes,
)
from jaxes.types import Strategy, Task

# One source of truth: the installed package metadata (pyproject.toml).
__version__ = importlib.metadata.version("jaxes")

# Functions and types; the modules imported above (centroid, noise, subspace, testing, ...)
# are attributes of jaxes too, but `from jaxes import *` brings only these.
__all__ = [
    "NoiseSource",
    "OpenESInfo",
    "OpenESState",
    "Perturbations",
    "PopulationMoments",
    "Strategy",
    "StrategyInfo",
    "Task",
    "ars",
    "centered_rank",
    "centre",
    "classical_estimator",
    "cma_es",
    "displacement_update",
    "evaluate",
    "open_es",
    "pgpe",
    "raw",
    "sep_cma_es",
    "snes",
    "xnes",
    "z_score",
]
