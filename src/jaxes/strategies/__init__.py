"""Strategy factories; each returns a ``jaxes.Strategy``.

``STRATEGIES`` names every factory (the CLI's ``--strategy`` and ``TrainConfig.strategy``
read it); ``base`` holds the types every strategy shares.

Keywords the strategies share (each factory lists which it takes):

- ``fitness_shaping``: ``"centered_rank"`` (the default), ``"z_score"``, ``"raw"``,
  ``"log_rank"`` or a callable ``(P,) -> (P,)`` (``jaxes.shaping``); ``"raw"``'s and a
  callable's weights are ``jaxes.shaping.bounded`` (exact between 2⁻²⁰ and 2⁴⁰ in magnitude).
- ``noise``: where the members' noise comes from: a ``jaxes.noise`` source
  (``jaxes.noise.lowrank(rank=4)``: rank-4 products ``A Bᵀ/√r`` for every leaf with two or
  more axes, clamped per leaf to ``min(m, n)``; ``jaxes.noise.noise_table(size)``: a table of
  ``size`` floats; ``jaxes.noise.gaussian()``) or its name: ``"auto"`` (the default:
  ``"gaussian"`` for a population of fewer than ``2**14`` noise values, ``"table"``
  otherwise; ``jaxes.noise.auto``), ``"table"`` (windows of a noise table sized to the
  problem, ``jaxes.noise.table_size``: about ``3d``, at least ``2**16``, at most ``2**24``),
  ``"gaussian"`` (fresh draws from keys) or ``"lowrank"`` (rank 1).
- ``sigma_floor``: σ never goes below it (> 0), whatever a schedule or an update returns;
  ``None`` is ``1e-8`` for a float32 state, finer for float64 (``default_sigma_floor``).
- ``memory_budget``: bytes of members (evaluation) or rebuilt noise (``tell``) in flight at
  once; ``None`` is 64 MiB and at least one member.
- ``track_best``: keep what rebuilds the best member seen (``strategy.best_params``): a
  float32 copy of θ and the scale of its population, taken when a better member appears.
  False keeps only its fitness.
- Numeric settings may be JAX scalars, so a run can be ``vmap``-ed over a grid of them;
  they are checked when concrete.
"""

from collections.abc import Callable

from jaxes.strategies.ars import ARSState, ars
from jaxes.strategies.base import BestMember, EstimateStats, StrategyInfo, centre
from jaxes.strategies.cma_es import CMAState, cma_es
from jaxes.strategies.cr_fm_nes import CRFMNESState, cr_fm_nes
from jaxes.strategies.ga import GASeedState, GAState, ga
from jaxes.strategies.guided_es import GuidedESState, guide, guided_es
from jaxes.strategies.lm_ma_es import LMMAState, lm_ma_es
from jaxes.strategies.ma_es import MAState, ma_es
from jaxes.strategies.nres import NRESState, nres
from jaxes.strategies.open_es import OpenESState, open_es
from jaxes.strategies.pes import PESState, pes
from jaxes.strategies.pgpe import PGPEState, pgpe
from jaxes.strategies.sep_cma_es import SepCMAState, sep_cma_es
from jaxes.strategies.snes import SNESState, snes
from jaxes.strategies.termination import TerminationInfo
from jaxes.strategies.xnes import XNESState, xnes
from jaxes.types import Strategy

# The factories by name; each takes (population_size, sigma, learning_rate=...) with
# ``learning_rate`` the mean's step size, except ``ga``, whose θ is a member it selects.
STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "open_es": open_es,
    "pgpe": pgpe,
    "snes": snes,
    "ars": ars,
    "sep_cma_es": sep_cma_es,
    "cma_es": cma_es,
    "ma_es": ma_es,
    "lm_ma_es": lm_ma_es,
    "xnes": xnes,
    "cr_fm_nes": cr_fm_nes,
    "pes": pes,
    "nres": nres,
    "guided_es": guided_es,
    "ga": ga,
}

__all__ = [
    "STRATEGIES",
    "ARSState",
    "CMAState",
    "LMMAState",
    "MAState",
    "GAState",
    "GASeedState",
    "GuidedESState",
    "CRFMNESState",
    "BestMember",
    "NRESState",
    "EstimateStats",
    "OpenESState",
    "PESState",
    "PGPEState",
    "SNESState",
    "SepCMAState",
    "StrategyInfo",
    "TerminationInfo",
    "XNESState",
    "ars",
    "centre",
    "cma_es",
    "lm_ma_es",
    "ma_es",
    "ga",
    "guide",
    "guided_es",
    "cr_fm_nes",
    "nres",
    "open_es",
    "pes",
    "pgpe",
    "sep_cma_es",
    "snes",
    "xnes",
]
