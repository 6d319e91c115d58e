"""Strategy factories; each returns a ``jaxes.Strategy``."""

from jaxes.strategies.ars import ARSState, ars
from jaxes.strategies.common import BestMember, EstimateStats, StrategyInfo, centre
from jaxes.strategies.open_es import OpenESInfo, OpenESState, open_es
from jaxes.strategies.pgpe import PGPEState, pgpe
from jaxes.strategies.sep_cma_es import SepCMAState, sep_cma_es
from jaxes.strategies.snes import SNESState, snes

__all__ = [
    "ARSState",
    "BestMember",
    "EstimateStats",
    "OpenESInfo",
    "OpenESState",
    "PGPEState",
    "SNESState",
    "SepCMAState",
    "StrategyInfo",
    "ars",
    "centre",
    "open_es",
    "pgpe",
    "sep_cma_es",
    "snes",
]
