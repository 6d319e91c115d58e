"""Strategy factories; each returns a ``jaxes.Strategy``.

``STRATEGIES`` names every factory (the CLI's ``--strategy`` and ``TrainConfig.strategy``
read it); ``base`` holds the types every strategy shares.
"""

from collections.abc import Callable

from jaxes.strategies.ars import ARSState, ars
from jaxes.strategies.base import BestMember, EstimateStats, StrategyInfo, centre
from jaxes.strategies.cma_es import CMAState, cma_es
from jaxes.strategies.open_es import OpenESState, open_es
from jaxes.strategies.pgpe import PGPEState, pgpe
from jaxes.strategies.sep_cma_es import SepCMAState, sep_cma_es
from jaxes.strategies.snes import SNESState, snes
from jaxes.strategies.termination import TerminationInfo
from jaxes.strategies.xnes import XNESState, xnes
from jaxes.types import Strategy

# The factories by name; each takes (population_size, sigma, learning_rate=...) with
# ``learning_rate`` the mean's step size.
STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "open_es": open_es,
    "pgpe": pgpe,
    "snes": snes,
    "ars": ars,
    "sep_cma_es": sep_cma_es,
    "cma_es": cma_es,
    "xnes": xnes,
}

__all__ = [
    "STRATEGIES",
    "ARSState",
    "CMAState",
    "BestMember",
    "EstimateStats",
    "OpenESState",
    "PGPEState",
    "SNESState",
    "SepCMAState",
    "StrategyInfo",
    "TerminationInfo",
    "XNESState",
    "ars",
    "centre",
    "cma_es",
    "open_es",
    "pgpe",
    "sep_cma_es",
    "snes",
    "xnes",
]
