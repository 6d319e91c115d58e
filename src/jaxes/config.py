"""The settings of a Brax training run (``TrainConfig``), the strategy registry, and ``build``.

``TrainConfig`` is what ``jaxes train`` writes as ``config.json``; every field is checked when
the config is made, so a bad setting fails before anything is written, with a message that
names the field (and the file, when it came from one).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from collections.abc import Callable

from jaxes import rundir, runner
from jaxes.strategies import ars, open_es, pgpe, sep_cma_es, snes
from jaxes.tasks import brax as brax_tasks
from jaxes.types import Strategy, Task

# The factories ``TrainConfig.strategy`` names; each takes (population_size, sigma,
# learning_rate=...) with ``learning_rate`` the mean's step size.
STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "open_es": open_es,
    "pgpe": pgpe,
    "snes": snes,
    "ars": ars,
    "sep_cma_es": sep_cma_es,
}
LEARNING_RATE_MEANING = (
    "Adam's for open_es, ClipUp's step for pgpe, η_μ for snes, α for ars, c_m for sep_cma_es"
)
POLICIES = ("linear", "mlp")


def strategy_default(strategy: str, setting: str) -> float:
    """A strategy factory's own default for ``sigma`` or ``learning_rate``: the CLI and
    ``TrainConfig`` use the Python defaults, so there is one place to change them.

    Example:
      >>> strategy_default("open_es", "sigma"), strategy_default("snes", "learning_rate")
      (0.05, 1.0)
    """
    return inspect.signature(STRATEGIES[strategy]).parameters[setting].default


class ConfigError(ValueError):
    """A training setting is invalid; the message names it and what is allowed."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every setting of a Brax run; saved as ``config.json`` in the run directory.

    ``sigma`` and ``learning_rate`` left as ``None`` take the strategy's own defaults.

    Example:
      >>> TrainConfig(strategy="snes").learning_rate
      1.0
      >>> TrainConfig(seed=2**31)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.config.ConfigError: seed: expected an int in [0, 2147483647], got 2147483648
    """

    env: str = "inverted_pendulum"
    backend: str = "spring"
    episode_length: int = 1000
    strategy: str = "open_es"
    population_size: int = 32
    sigma: float | None = None
    learning_rate: float | None = None
    generations: int = 80
    seed: int = 0
    policy: str = "linear"
    hidden_sizes: tuple[int, ...] = (32, 32)
    episodes_per_member: int = 1
    eval_every: int = 5
    eval_episodes: int = 8
    checkpoint_every: int = 10
    normalize_observations: bool = True
    devices: int = 0

    def __post_init__(self):
        for name in ("episode_length", "population_size", "episodes_per_member", "eval_episodes"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ConfigError(f"{name}: expected an int >= 1, got {value!r}")
        try:  # the runner's own checks of its loop settings
            runner.check_loop(
                self.generations, self.seed, self.eval_every, self.checkpoint_every, self.devices
            )
        except ValueError as err:
            raise ConfigError(str(err)) from None
        for name in ("env", "backend", "strategy", "policy"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name}: expected a string, got {getattr(self, name)!r}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"strategy: unknown {self.strategy!r}; allowed: {sorted(STRATEGIES)}")
        for name in ("sigma", "learning_rate"):
            value = getattr(self, name)
            if value is None:
                object.__setattr__(self, name, strategy_default(self.strategy, name))
            elif (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ConfigError(f"{name}: expected a finite number > 0, got {value!r}")
            else:
                object.__setattr__(self, name, float(value))
        if self.policy not in POLICIES:
            raise ConfigError(f"policy: unknown {self.policy!r}; allowed: {list(POLICIES)}")
        sizes = self.hidden_sizes
        if not isinstance(sizes, list | tuple) or not all(_is_int(s) and s >= 1 for s in sizes):
            raise ConfigError(f"hidden_sizes: expected a list of ints >= 1, got {sizes!r}")
        object.__setattr__(self, "hidden_sizes", tuple(sizes))
        if not isinstance(self.normalize_observations, bool):
            raise ConfigError(
                f"normalize_observations: expected true or false, got "
                f"{self.normalize_observations!r}"
            )
        if self.backend not in brax_tasks.BACKENDS:
            raise ConfigError(
                f"backend: unknown {self.backend!r}; allowed: {list(brax_tasks.BACKENDS)}"
            )

    def to_dict(self) -> dict:
        """The settings as JSON-ready values (what ``config.json`` holds)."""
        data = dataclasses.asdict(self)
        data["hidden_sizes"] = list(self.hidden_sizes)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data, source: str = "config") -> TrainConfig:
        """A config from ``config.json``-style data: every setting present, none unknown.

        Errors start with ``source`` (e.g. the file's path).

        Example:
          >>> TrainConfig.from_dict({"env": "ant"}, "run/config.json")  # doctest: +ELLIPSIS
          Traceback (most recent call last):
            ...
          jaxes.config.ConfigError: run/config.json: missing settings ['backend', ...]
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a JSON object of settings, got {data!r:.60}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(f"{source}: unknown settings {unknown}; allowed: {names}")
        missing = [n for n in names if n not in data]
        if missing:
            raise ConfigError(f"{source}: missing settings {missing}")
        try:
            return cls(**data)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None


def read_config(path: str) -> TrainConfig:
    """The ``TrainConfig`` in a ``config.json``; errors name the file (and the field)."""
    return TrainConfig.from_dict(rundir.read_json(path), path)


def build(config: TrainConfig) -> tuple[Strategy, Task]:
    """The strategy and the Brax task a config describes (errors name the bad setting).

    Building compiles nothing (the observation size comes from a traced reset).

    Example:
      >>> strategy, task = build(TrainConfig(strategy="pgpe", population_size=8))
      >>> strategy.population_size, type(task.env).__name__
      (8, 'InvertedPendulum')
      >>> build(TrainConfig(population_size=7))  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.config.ConfigError: open_es: population_size: antithetic pairs need an even ...
    """
    task = brax_tasks.brax_task(
        config.env,
        config.backend,
        config.episode_length,
        config.policy,
        config.hidden_sizes,
        episodes_per_member=config.episodes_per_member,
        eval_episodes=config.eval_episodes,
        normalize_observations=config.normalize_observations,
    )
    try:
        strategy = STRATEGIES[config.strategy](
            config.population_size, config.sigma, learning_rate=config.learning_rate
        )
    except ValueError as err:
        raise ConfigError(f"{config.strategy}: {err}") from err
    return strategy, task
