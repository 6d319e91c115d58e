"""Checks of a factory's settings, turned into what the strategy closes over (internal).

Every check runs when the factory is called, so a bad setting fails before anything is
traced, with a message naming the setting.
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxes import noise as noise_lib
from jaxes import shaping as shaping_lib
from jaxes import trees
from jaxes.checks import check_int, check_positive, is_traced
from jaxes.noise import NOISE_SOURCES, NoiseSource, lowrank
from jaxes.strategies.state import scalar_dtype

Schedule = Callable[[jax.Array], jax.Array]


# σ's floor for float32 states; a wider dtype's floor is as much finer as its resolution.
DEFAULT_SIGMA_FLOOR = 1e-8


def default_sigma_floor(dtype) -> float:
    """``1e-8`` for float32, scaled by the dtype's resolution (about ``1.9e-17`` for float64),
    so a float64 run can shrink σ as far as its precision allows.

    Example:
      >>> import jax.numpy as jnp
      >>> default_sigma_floor(jnp.float32), f"{default_sigma_floor(jnp.float64):.2g}"
      (1e-08, '1.9e-17')
    """
    ratio = float(np.finfo(dtype).eps) / float(np.finfo(np.float32).eps)
    return DEFAULT_SIGMA_FLOOR * ratio


def floor_sigma(sigma, sigma_floor=None) -> jax.Array:
    """``sigma`` (a JAX scalar or array) never below ``sigma_floor`` (``None``:
    ``default_sigma_floor`` of its dtype); NaN gives the floor too, so a bad σ never reaches
    the parameters.

    Example:
      >>> import jax.numpy as jnp
      >>> floor_sigma(jnp.array([0.5, 0.0, jnp.nan]), 0.1).tolist()
      [0.5, 0.10000000149011612, 0.10000000149011612]
    """
    dtype = jnp.result_type(sigma)
    low = jnp.asarray(default_sigma_floor(dtype) if sigma_floor is None else sigma_floor, dtype)
    return jnp.where(sigma > low, sigma, low)


def check_population_size(population_size, antithetic: bool) -> int:
    """``P`` must be a static int >= 2, and even with antithetic pairs (a pair is ``±ε``;
    strategies that sample independent members, such as snes and sep_cma_es by default,
    take any ``P >= 2``)."""
    p = check_int("population_size", population_size, 2)
    if antithetic and p % 2:
        raise ValueError(
            f"population_size: antithetic pairs need an even population, got {p}; "
            f"use {p - 1} or {p + 1}, or antithetic=False"
        )
    return p


def scheduled_sigma(sigma, sigma_floor=None) -> tuple[Callable, Callable]:
    """``(scale(state), initial(master))`` of a σ that follows ``sigma_schedule``: σ at the
    state's generation in its scalar dtype, and the first population's σ for master params."""
    at = sigma_schedule(sigma, sigma_floor)

    def scale(state) -> jax.Array:
        return at(state.generation, scalar_dtype(state))

    def initial(master) -> jax.Array:
        return at(0, trees.state_dtype(master))

    return scale, initial


def sigma_schedule(sigma, sigma_floor=None) -> Schedule:
    """σ as a function of the generation (and the state's dtype, float32 by default): a
    constant > 0 (possibly a traced scalar) or an optax schedule, never below ``sigma_floor``
    (> 0, so a schedule that reaches 0, or returns NaN, gives the floor instead of NaN
    parameters; ``None`` is ``default_sigma_floor`` of the dtype).

    Example:
      >>> import optax
      >>> s = sigma_schedule(optax.exponential_decay(0.1, 1, 0.5), sigma_floor=0.02)
      >>> [round(float(s(t)), 3) for t in (0, 1, 5)]
      [0.1, 0.05, 0.02]
      >>> round(float(sigma_schedule(optax.linear_schedule(0.1, 0.0, 10))(20)), 12)  # floor
      1e-08
    """
    floor = None if sigma_floor is None else check_positive("sigma_floor", sigma_floor)

    def floored(value, dtype):
        return floor_sigma(jnp.asarray(value, dtype), floor)

    if callable(sigma):
        return lambda generation, dtype=jnp.float32: floored(sigma(generation), dtype)
    value = check_positive("sigma", sigma)
    return lambda generation, dtype=jnp.float32: floored(value, dtype)


def check_fixed_sigma(sigma, strategy: str) -> None:
    """Strategies that adapt σ themselves cannot also follow a schedule."""
    if callable(sigma):
        raise ValueError(
            f"sigma: {strategy} adapts σ itself, so σ cannot be a schedule; pass its initial "
            "value (a number > 0, or a pytree of them)"
        )


def is_zero(value) -> bool:
    """Whether a setting is a concrete 0 (a traced value might not be, so it is not)."""
    return value is not None and not is_traced(value) and value == 0


def check_sigma(sigma) -> None:
    """A per-coordinate σ: a number > 0 (possibly traced), or a pytree whose every entry is a
    finite number > 0."""
    leaves = jax.tree.leaves(sigma)
    if not leaves:
        raise ValueError("sigma: expected a number > 0 or a pytree of them, got an empty pytree")
    if len(leaves) == 1 and jnp.ndim(leaves[0]) == 0 and not isinstance(leaves[0], str):
        check_positive("sigma", leaves[0])
        return
    for leaf in leaves:
        if isinstance(leaf, str | bytes) or not (
            isinstance(leaf, numbers.Real | np.ndarray | jax.Array)
            and jnp.issubdtype(jnp.result_type(leaf), jnp.number)
        ):
            raise ValueError(f"sigma: expected numbers > 0, got {leaf!r}")
        if isinstance(leaf, jax.core.Tracer):
            continue
        values = np.asarray(leaf, np.float64)
        if not (np.all(np.isfinite(values)) and np.all(values > 0)):
            raise ValueError("sigma: every entry must be finite and > 0")


def per_coordinate(value, params, name: str = "sigma"):
    """A pytree like ``params`` (master params: float32 or float64) holding ``value`` (a
    scalar or such a pytree, whose leaves broadcast to the params' shapes) in each leaf's
    dtype; anything else is a ``ValueError`` naming ``name``."""
    single = jax.tree_util.treedef_is_leaf(jax.tree.structure(value))
    if not (single and jnp.ndim(value) == 0):
        if jax.tree.structure(value) != jax.tree.structure(params):
            raise ValueError(
                f"{name}: expected a number or a pytree like the params "
                f"({jax.tree.structure(params)}), got {jax.tree.structure(value)}"
            )
        for (path, v), x in zip(
            jax.tree_util.tree_leaves_with_path(value), jax.tree.leaves(params), strict=True
        ):
            try:
                fits = jnp.broadcast_shapes(jnp.shape(v), jnp.shape(x)) == jnp.shape(x)
            except ValueError:
                fits = False
            if not fits:
                raise ValueError(
                    f"{name}: leaf {jax.tree_util.keystr(path)} has shape {jnp.shape(v)}, which "
                    f"does not broadcast to the params' {jnp.shape(x)}"
                )
    return jax.tree.map(
        lambda v, x: jnp.broadcast_to(jnp.asarray(v, x.dtype), jnp.shape(x)),
        trees.broadcast_like(value, params),
        params,
    )


def check_optimizer(optimizer, default: Callable[[], optax.GradientTransformation]):
    """``optimizer``, or ``default()`` when it is ``None``; anything else must be optax's."""
    if optimizer is None:
        return default()
    if not isinstance(optimizer, optax.GradientTransformation):
        raise ValueError(
            f"optimizer: expected an optax.GradientTransformation, got {type(optimizer).__name__}"
        )
    return optimizer


def check_learning_rate(learning_rate):
    """The step size of an optax optimizer a factory builds: a number > 0 (possibly traced) or
    an optax schedule of the optimizer's step count, which counts the applied updates.

    Example:
      >>> import optax
      >>> schedule = optax.exponential_decay(0.1, 1, 0.9)
      >>> check_learning_rate(0.1), check_learning_rate(schedule) is schedule
      (0.1, True)
    """
    if callable(learning_rate):
        return learning_rate
    return check_positive("learning_rate", learning_rate)


def elite_count(population_size: int, elite_size, elite_ratio) -> int | None:
    """``μ``, the members recombined: ``elite_size`` (``1 <= μ <= P``), or ``max(1, ⌊r·P⌋)``
    for ``elite_ratio = r`` in ``(0, 1]`` (evosax's setting); ``None`` when neither is given
    (the strategy's own default). Both at once is an error naming both.

    Example:
      >>> elite_count(16, None, 0.1), elite_count(16, 3, None), elite_count(16, None, None)
      (1, 3, None)
    """
    if elite_ratio is None:
        if elite_size is None:
            return None
        return check_int("elite_size", elite_size, 1, population_size)
    if elite_size is not None:
        raise ValueError(
            f"elite_size, elite_ratio: give one of them (got {elite_size!r} and {elite_ratio!r})"
        )
    ratio = check_positive("elite_ratio", elite_ratio)
    if is_traced(ratio) or ratio > 1:
        raise ValueError(f"elite_ratio: expected a static number in (0, 1], got {elite_ratio!r}")
    return max(1, int(math.floor(ratio * population_size)))


def is_rank_shaping(fitness_shaping) -> bool | None:
    """Whether a ``fitness_shaping`` setting depends on fitness only through ranks (``None``
    for a callable, which jaxes cannot inspect).

    Example:
      >>> is_rank_shaping("centered_rank"), is_rank_shaping("z_score"), is_rank_shaping(abs)
      (True, False, None)
    """
    if callable(fitness_shaping):
        return None
    return fitness_shaping in shaping_lib.RANK_SHAPINGS


class NoiseSettings(NamedTuple):
    """The two noise settings every factory of a per-coordinate strategy takes (their meaning:
    ``jaxes.strategies``' docstring).

    Attributes:
      noise: a ``NoiseSource`` (``jaxes.noise.lowrank(rank=4)``, ``jaxes.noise.noise_table(size)``,
        ``jaxes.noise.gaussian()``, ...) or its name: ``"auto"``, ``"table"``, ``"gaussian"``
        or ``"lowrank"`` (rank 1).
      memory_budget: bytes in flight at once (``None``: 64 MiB).
    """

    noise: str | NoiseSource = "auto"
    memory_budget: int | None = None


def noise_source(noise: str | NoiseSource, bases: int) -> NoiseSource:
    """The source ``noise`` is or names, for a population of ``bases`` base perturbations (a
    name sizes a table to them; a source given is used as it was built).

    Example:
      >>> noise_source("lowrank", 4).name, noise_source(lowrank(3), 4).name
      ('lowrank(r=1)', 'lowrank(r=3)')
    """
    if isinstance(noise, NoiseSource):
        return noise
    if noise == "auto":
        return noise_lib.auto(None, bases)
    if noise == "table":
        return noise_lib.noise_table(None, bases)
    if noise == "gaussian":
        return noise_lib.gaussian()
    if noise == "lowrank":
        return lowrank(1)
    raise ValueError(
        f"noise: expected a jaxes.noise source (e.g. jaxes.noise.lowrank(rank=4)) or one of "
        f"{list(NOISE_SOURCES)}, got {noise!r}"
    )


def make_perturbations(
    settings: NoiseSettings,
    population_size: int,
    antithetic: bool,
    gaussian_term: str | None = None,
) -> noise_lib.Perturbations:
    """The static perturbation recipe a strategy's noise settings describe.

    ``gaussian_term`` names the strategy's term that holds only for Gaussian ``ε`` (a σ or
    covariance update), if it has one switched on: a non-Gaussian source is then refused.

    Example:
      >>> make_perturbations(NoiseSettings("gaussian"), 8, True).source.gaussian
      True
      >>> make_perturbations(NoiseSettings("lowrank"), 8, True, "a σ update")
      Traceback (most recent call last):
        ...
      ValueError: noise: 'lowrank(r=1)' perturbations are not Gaussian, and a σ update is derived for Gaussian ones; use noise='auto', 'gaussian' or 'table'
    """  # noqa: E501
    bases = population_size // 2 if antithetic else population_size
    source = noise_source(settings.noise, bases)
    if gaussian_term is not None and not source.gaussian:
        raise ValueError(
            f"noise: {source.name!r} perturbations are not Gaussian, and {gaussian_term} is "
            "derived for Gaussian ones; use noise='auto', 'gaussian' or 'table'"
        )
    return noise_lib.Perturbations(
        source=source,
        population_size=population_size,
        antithetic=bool(antithetic),
        memory_budget=noise_lib.check_memory_budget(settings.memory_budget),
    )


# Keywords issue 40 replaced by ``noise=`` without a release of warnings; accepted until
# the release after the one that warns.
OLD_NOISE_KEYWORDS = ("noise_rank", "noise_table_size", "noise_batch_size")


def accepts_old_noise_keywords(factory: Callable) -> Callable:
    """``factory`` also taking ``noise_rank``, ``noise_table_size`` and ``noise_batch_size``,
    each with a ``DeprecationWarning`` naming what replaces it: ``noise_rank=r`` is
    ``noise=jaxes.noise.lowrank(r)``, ``noise_table_size=n`` is
    ``noise=jaxes.noise.noise_table(n)``, and ``noise_batch_size`` is ignored
    (``memory_budget`` sets how many perturbations ``tell`` rebuilds at once).

    Example:
      >>> import warnings, jaxes
      >>> with warnings.catch_warnings(record=True) as caught:
      ...     warnings.simplefilter("always")
      ...     es = jaxes.open_es(8, noise_rank=2)
      >>> print(caught[0].message)  # doctest: +ELLIPSIS
      open_es: noise_rank is deprecated ...; pass noise=jaxes.noise.lowrank(2)
    """

    @functools.wraps(factory)
    def with_old_keywords(*args, **kwargs):
        old = {name: kwargs.pop(name) for name in OLD_NOISE_KEYWORDS if name in kwargs}
        if "noise_rank" in old and "noise_table_size" in old:
            raise ValueError(
                "noise_rank, noise_table_size: give one noise source; pass "
                "noise=jaxes.noise.lowrank(rank) or noise=jaxes.noise.noise_table(size)"
            )
        for name, value in old.items():
            replacement = _replacement(name, value, kwargs)
            warnings.warn(
                f"{factory.__name__}: {name} is deprecated (issue 40 folded the noise keywords "
                f"into noise=) and goes in the next release; {replacement}",
                DeprecationWarning,
                stacklevel=2,
            )
        return factory(*args, **kwargs)

    return with_old_keywords


def _replacement(name: str, value, kwargs: dict) -> str:
    """What replaces the old keyword ``name``; sets ``kwargs["noise"]`` where one does."""
    if name == "noise_batch_size":
        return "it is ignored: memory_budget sets how many perturbations tell rebuilds at once"
    allowed = ("auto", "lowrank") if name == "noise_rank" else ("auto", "table")
    if kwargs.get("noise", "auto") not in allowed:
        raise ValueError(
            f"{name}: given with noise={kwargs['noise']!r}; pass one noise source as noise="
        )
    if name == "noise_rank":
        kwargs["noise"] = lowrank(check_int("noise_rank", value, 1))
        return f"pass noise=jaxes.noise.lowrank({value})"
    kwargs["noise"] = noise_lib.noise_table(check_int("noise_table_size", value, 1))
    return f"pass noise=jaxes.noise.noise_table({value})"
