"""The settings of a training run, checked: its loop, its stopping rules, its seeds, and the
record of them that ``config.json`` holds.

Every check raises a ``ValueError`` that names the bad setting, before anything is compiled or
written. ``TrainConfig`` (``jaxes.app.config``) checks its loop fields with the same functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from jaxes.checks import check_int
from jaxes.types import Strategy

MAX_SEED = 2**31 - 1  # jax.random.key takes a signed 32-bit seed without x64
INT32_MAX = 2**31 - 1
# Settings a resumed run may change: when to stop, not what it does.
MAY_CHANGE = ("generations", "timesteps", "target_return")


def check_loop(generations, seed, eval_every, checkpoint_every=None, devices=0) -> dict[str, int]:
    """The loop's settings, checked (``ValueError`` naming the bad one); ``checkpoint_every``
    defaults to ``eval_every``. ``TrainConfig`` checks its loop fields with this too.

    Example:
      >>> check_loop(20, 0, 5)["checkpoint_every"]
      5
      >>> check_loop(20, 0, 5, 7)
      Traceback (most recent call last):
        ...
      ValueError: checkpoint_every: must be a multiple of eval_every (5), got 7
    """
    checkpoint_every = eval_every if checkpoint_every is None else checkpoint_every
    loop = dict(
        generations=check_int("generations", generations, 1),
        seed=check_int("seed", seed, 0, MAX_SEED),
        eval_every=check_int("eval_every", eval_every, 1),
        checkpoint_every=check_int("checkpoint_every", checkpoint_every, 1),
        devices=check_int("devices", devices, 0),
    )
    if loop["checkpoint_every"] % loop["eval_every"]:
        raise ValueError(
            f"checkpoint_every: must be a multiple of eval_every ({eval_every}), "
            f"got {checkpoint_every}"
        )
    return loop


def check_stops(timesteps=None, target_return=None) -> None:
    """The stopping rules, checked (``ValueError`` naming the bad one): ``timesteps`` an int
    >= 1 or ``None``, ``target_return`` a finite number or ``None``.

    Example:
      >>> check_stops(timesteps=-1)
      Traceback (most recent call last):
        ...
      ValueError: timesteps: expected an int >= 1, got -1
    """
    if timesteps is not None:
        check_int("timesteps", timesteps, 1)
    if target_return is not None and (
        not isinstance(target_return, int | float)
        or isinstance(target_return, bool)
        or not math.isfinite(target_return)
    ):
        raise ValueError(f"target_return: expected a finite number, got {target_return!r}")


def check_seeds(seeds) -> list[int]:
    """``seeds`` as a list of distinct ints in 0 .. 2³¹ - 1 (``ValueError`` naming ``seeds``).

    Example:
      >>> check_seeds(range(3))
      [0, 1, 2]
      >>> check_seeds([4, 4])
      Traceback (most recent call last):
        ...
      ValueError: seeds: expected distinct seeds, got [4, 4]
    """
    try:
        seeds = list(seeds)
    except TypeError:
        raise ValueError(f"seeds: expected a list of ints, got {seeds!r}") from None
    if not seeds:
        raise ValueError("seeds: expected at least one seed")
    for value in seeds:
        check_int("seeds", value, 0, MAX_SEED)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected distinct seeds, got {seeds}")
    return seeds


def strategy_name(strategy: Strategy) -> str:
    """The name a run records for ``strategy``: its traits' name, or ``"custom"``.

    Example:
      >>> import jaxes
      >>> strategy_name(jaxes.snes(8))
      'snes'
    """
    return strategy.traits.name if strategy.traits is not None else "custom"


def run_settings(
    strategy: Strategy, loop: dict, config: Mapping | None, stops: Mapping | None = None
) -> dict:
    """The settings ``config.json`` records: the ``loop``'s (``check_loop``), the strategy's
    name and population, and the caller's ``config`` (JSON values; where it repeats one of
    those it must agree).

    Example:
      >>> import jaxes
      >>> s = run_settings(jaxes.pgpe(8), check_loop(20, 0, 5), {"lr": 0.1})
      >>> s["strategy"], s["checkpoint_every"], s["lr"]
      ('pgpe', 5, 0.1)
    """
    own = {
        "strategy": strategy_name(strategy),
        "population_size": strategy.population_size,
        **loop,
        **(stops or {}),
    }
    try:
        extra = json.loads(json.dumps(dict(config or {}), allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"config: expected JSON values (numbers, strings, lists), {err}") from None
    for name, value in extra.items():
        if name in own and value != own[name]:
            raise ValueError(f"config: {name}={value!r} differs from the run's {own[name]!r}")
    return {**extra, **own}
