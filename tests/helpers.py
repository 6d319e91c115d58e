"""What several test files share: the strategy table, the reader of printed numbers, and the
bit-for-bit comparison of two states."""

from __future__ import annotations

import re
from collections.abc import Callable

import jax
import numpy as np

import jaxes
from jaxes.types import Strategy

STRATEGY_NAMES = (
    "ars",
    "cma_es",
    "cr_fm_nes",
    "ga",
    "guided_es",
    "lm_ma_es",
    "ma_es",
    "open_es",
    "pgpe",
    "sep_cma_es",
    "snes",
    "xnes",
)

# A printed number: a float in any notation Python prints, or nan / ±inf (so a bad value is
# read and fails the comparison that follows, not the parse).
NUMBER = r"(-?[0-9][0-9.eE+-]*|nan|-?inf)"


def strategies(
    population_size: int, sigma: float, **settings: dict
) -> dict[str, Callable[..., Strategy]]:
    """The strategies as ``{name: factory}``; ``factory(**kw)`` builds one.

    Args:
      population_size: every strategy's population.
      sigma: every strategy's σ unless its ``settings`` give another.
      **settings: per strategy name, keywords for its factory (``sigma`` among them).

    Example:
      >>> table = strategies(8, 0.1, ars=dict(top_k=4))
      >>> sorted(table) == list(STRATEGY_NAMES), table["ars"]().population_size
      (True, 8)
    """
    unknown = set(settings) - set(STRATEGY_NAMES)
    assert not unknown, f"no strategy named {sorted(unknown)}"

    def factory(name: str) -> Callable[..., Strategy]:
        def make(**kw) -> Strategy:
            return getattr(jaxes, name)(
                population_size, **{"sigma": sigma, **settings.get(name, {}), **kw}
            )

        return make

    return {name: factory(name) for name in STRATEGY_NAMES}


def number(pattern: str, text: str) -> float:
    """The number printed right after ``pattern`` (a regex) in ``text``; fails if none is.

    Example:
      >>> number(r"return:", "final return: 951.5 after 40 generations")
      951.5
    """
    match = re.search(pattern + r"\s*" + NUMBER, text)
    assert match, f"{pattern!r} not printed; output:\n{text[-3000:]}"
    return float(match.group(1))


def assert_states_identical(a, b) -> None:
    """Every leaf of ``a`` equals ``b``'s bit for bit (keys by their data)."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        if hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
