"""The big-model wing: perturbations kept as low-rank factors, and members evaluated with their
factors applied inside a model's layers (``x W + (x A) Bᵀ``), never built.

The package, one job a module:
  * ``lowrank``: ``LowRank``, a matrix kept as factors, and what a ``tell`` does with one
    unmultiplied (scale, subtract, norms, inner products, ``after``);
  * ``ordering``: ``after``, a value kept bit for bit but computed after another exists (one
    layer's converted weights at a time);
  * ``noise``: the low-rank noise source ``lowrank(rank)`` (public as ``jaxes.noise.lowrank``)
    and the sums of its factors;
  * ``terms``: the factored term each flax layer kind adds, and the int8 ``nn.Dense`` forward;
  * ``int8``: weight-only int8 (``Int8``, ``quantize``, ``dequantize``);
  * ``members``: ``matmul``, ``member``, ``apply`` and ``evaluate``, this package's own names
    (``jaxes.factored.apply``).

Example:
  >>> import jax, jax.numpy as jnp, flax.linen as nn
  >>> from jaxes import factored
  >>> params = nn.Dense(2).init(jax.random.key(0), jnp.ones(3))
  >>> factored.apply(nn.Dense(2), params, None, jnp.ones(3)).shape
  (2,)
"""

# The public names live in ``members``, imported on first use (PEP 562), not here. Importing
# any submodule runs this file first, and ``jaxes.noise`` (the core) imports ``lowrank`` and
# ``noise`` from here while ``members`` imports ``jaxes.noise``: an eager import of ``members``
# would run ``jaxes.noise`` half-built.

import importlib

__all__ = ["apply", "evaluate", "matmul", "member"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("jaxes.factored.members"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
