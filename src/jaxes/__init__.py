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

import importlib
import importlib.metadata
import os
import sys
from typing import TYPE_CHECKING


def _invoked_as_command() -> bool:
    """Whether this process is the ``jaxes`` command (the console script or ``python -m``)."""
    argv = getattr(sys, "orig_argv", sys.argv)
    by_module = "-m" in argv and argv[argv.index("-m") + 1 :][:1] == ["jaxes"]
    return os.path.basename(sys.argv[0]) == "jaxes" or by_module


# The `jaxes` command's output is its own lines (and one line for an error), but importing this
# package runs before any of its code, so what it needs first is done here. jaxlib reads its
# C++ log level once, when it loads, and before 0.10 it logs an error line for every program
# it loads from the compile cache: the command keeps XLA's log to fatal errors (JAXES_DEBUG=1
# shows it, with tracebacks). The level is set, not defaulted: `import jax` puts its own
# default into the environment, which a parent process that imported JAX passes on.
if _invoked_as_command() and not os.environ.get("JAXES_DEBUG"):
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"

from jaxes import compat  # no JAX here: it reads the installed versions from package metadata


def _refuse_unsupported_jax() -> None:
    try:
        compat.require_supported_jax()
    except compat.UnsupportedJax as unsupported:
        if _invoked_as_command():  # one line and no traceback, as every error of the command
            sys.stderr.write(f"jaxes: error: {unsupported}\n")
            raise SystemExit(2) from None
        raise


_refuse_unsupported_jax()

# One source of truth: the installed package metadata (pyproject.toml).
__version__ = importlib.metadata.version("jaxes")

# The public names and the module each comes from. `import jaxes` imports none of them (nor
# JAX): each is imported when first read (PEP 562), so `jaxes --version` starts in a blink and
# `jaxes.open_es` costs what it did. The same imports are spelled out below for type checkers.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "jaxes.centroid": ("PopulationMoments", "classical_estimator", "displacement_update"),
    "jaxes.evaluation": ("evaluate",),
    "jaxes.noise": ("NoiseSource", "Perturbations"),
    "jaxes.shaping": ("centered_rank", "raw", "z_score"),
    "jaxes.strategies": (
        "ARSState",
        "CMAState",
        "CRFMNESState",
        "GAState",
        "GASeedState",
        "GuidedESState",
        "LMMAState",
        "MAState",
        "NRESState",
        "OpenESState",
        "PESState",
        "PGPEState",
        "SepCMAState",
        "SNESState",
        "StrategyInfo",
        "TerminationInfo",
        "XNESState",
        "ars",
        "centre",
        "cma_es",
        "cr_fm_nes",
        "ga",
        "guide",
        "guided_es",
        "lm_ma_es",
        "ma_es",
        "nres",
        "open_es",
        "pes",
        "pgpe",
        "sep_cma_es",
        "snes",
        "xnes",
    ),
    "jaxes.types": ("Strategy", "Task"),
}
_HOMES = {name: module for module, names in _EXPORTS.items() for name in names}
# The modules that are attributes of jaxes (jaxes.noise, jaxes.testing, ...), also imported
# when first read.
_SUBMODULES = (
    "centroid",
    "checks",
    "compat",
    "diagnostics",
    "evaluation",
    "factored",
    "noise",
    "optim",
    "shaping",
    "strategies",
    "subspace",
    "testing",
    "trees",
    "types",
)

# Functions and types; the modules above (centroid, noise, subspace, testing, ...) are
# attributes of jaxes too, but `from jaxes import *` brings only these.
__all__ = [
    "ARSState",
    "CMAState",
    "LMMAState",
    "MAState",
    "GAState",
    "GASeedState",
    "GuidedESState",
    "CRFMNESState",
    "NRESState",
    "PESState",
    "PGPEState",
    "SNESState",
    "SepCMAState",
    "TerminationInfo",
    "XNESState",
    "NoiseSource",
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
    "lm_ma_es",
    "ma_es",
    "ga",
    "guide",
    "guided_es",
    "cr_fm_nes",
    "displacement_update",
    "evaluate",
    "nres",
    "open_es",
    "pes",
    "pgpe",
    "raw",
    "sep_cma_es",
    "snes",
    "xnes",
    "z_score",
]


def __getattr__(name: str):
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # read once: later reads are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES, *_SUBMODULES})


if TYPE_CHECKING:
    from jaxes import (  # noqa: F401 - modules as attributes
        centroid,
        checks,
        diagnostics,
        evaluation,
        factored,
        noise,
        optim,
        shaping,
        strategies,
        subspace,
        testing,
        trees,
        types,
    )
    from jaxes.centroid import PopulationMoments, classical_estimator, displacement_update
    from jaxes.evaluation import evaluate
    from jaxes.noise import NoiseSource, Perturbations
    from jaxes.shaping import centered_rank, raw, z_score
    from jaxes.strategies import (
        ARSState,
        CMAState,
        CRFMNESState,
        GASeedState,
        GAState,
        GuidedESState,
        LMMAState,
        MAState,
        NRESState,
        OpenESState,
        PESState,
        PGPEState,
        SepCMAState,
        SNESState,
        StrategyInfo,
        TerminationInfo,
        XNESState,
        ars,
        centre,
        cma_es,
        cr_fm_nes,
        ga,
        guide,
        guided_es,
        lm_ma_es,
        ma_es,
        nres,
        open_es,
        pes,
        pgpe,
        sep_cma_es,
        snes,
        xnes,
    )
    from jaxes.types import Strategy, Task
