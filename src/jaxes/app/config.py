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

import jax

from jaxes import noise as noise_lib
from jaxes import shaping, trees
from jaxes import subspace as subspace_lib
from jaxes.app import presets
from jaxes.noise import NOISE_SOURCES
from jaxes.strategies import STRATEGIES
from jaxes.tasks import brax as brax_tasks
from jaxes.tasks.brax import envs as brax_envs
from jaxes.training import rundir
from jaxes.training.settings import check_loop, check_stops
from jaxes.types import Strategy, Task

LEARNING_RATE_MEANING = (
    "Adam's for open_es, ClipUp's step for pgpe, η_μ for snes, α for ars, c_m for sep_cma_es"
)
POLICIES = ("linear", "mlp", "vbn_mlp")
# A gymnax env (jaxes.tasks.gymnax) also takes MinAtar's conv networks.
GYMNAX_POLICIES = ("linear", "mlp", "vbn_mlp", "conv", "vbn_conv")


def strategy_default(strategy: str, setting: str):
    """A strategy factory's own default for one of its settings: the CLI and
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


# Settings a strategy factory may take; each is passed only to the factories that have it.
STRATEGY_SETTINGS = (
    "sigma",
    "learning_rate",
    "l2_coeff",
    "fitness_shaping",
    "noise",
)
# Settings added after runs were first written, and what a config.json without one meant
# (the default then, not the env's preset now).
ADDED_LATER = {
    "noise_rank": 1,
    "vbn_reference_size": 128,
    "subspace_dim": None,
    "subspace_projection": "dense",
    "preset": None,
}


def takes(strategy: str, setting: str) -> bool:
    """Whether the factory of ``strategy`` has the keyword ``setting``.

    Example:
      >>> takes("open_es", "l2_coeff"), takes("ars", "fitness_shaping")
      (True, False)
    """
    return setting in inspect.signature(STRATEGIES[strategy]).parameters


def _takers(setting: str) -> list[str]:
    return [name for name in STRATEGIES if takes(name, setting)]


def _check_number(name: str, value, low: float, inclusive: bool) -> float:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= low if inclusive else value > low)
    )
    if not ok:
        bound = f">= {low:g}" if inclusive else f"> {low:g}"
        raise ConfigError(f"{name}: expected a finite number {bound}, got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every setting of a Brax run; saved as ``config.json`` in the run directory.

    A setting left as ``None`` is filled from the env's preset (``jaxes.app.presets``; with
    ``preset=NAME``, the named row ``presets.NAMED[NAME][env]`` laid over it), then from
    the strategy's own defaults: ``TrainConfig(env="hopper")`` is what ``jaxes train --env
    hopper`` runs. ``timesteps`` and ``target_return`` stay ``None`` (no limit) unless given.

    Example:
      >>> TrainConfig(strategy="snes").learning_rate
      1.0
      >>> TrainConfig(env="swimmer").backend, TrainConfig(env="hopper", sigma=0.1).sigma
      ('generalized', 0.1)
      >>> TrainConfig(seed=2**31)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.app.config.ConfigError: seed: expected an int in [0, 2147483647], got 2147483648
    """

    env: str = "inverted_pendulum"
    preset: str | None = None
    backend: str | None = None
    episode_length: int | None = None
    strategy: str = "open_es"
    population_size: int | None = None
    sigma: float | None = None
    learning_rate: float | None = None
    l2_coeff: float | None = None
    fitness_shaping: str | None = None
    noise: str | None = None
    noise_rank: int | None = None
    generations: int | None = None
    seed: int = 0
    policy: str | None = None
    hidden_sizes: tuple[int, ...] | None = None
    episodes_per_member: int = 1
    action_repeat: int = 1
    vbn_reference_size: int | None = None
    subspace_dim: int | None = None
    subspace_projection: str = "dense"
    eval_every: int | None = None
    eval_episodes: int | None = None
    checkpoint_every: int | None = None
    normalize_observations: bool | None = None
    timesteps: int | None = None
    target_return: float | None = None
    devices: int = 0

    def __post_init__(self):
        for name in ("env", "strategy"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name}: expected a string, got {getattr(self, name)!r}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"strategy: unknown {self.strategy!r}; allowed: {sorted(STRATEGIES)}")
        self._fill_from_preset()
        gymnax = presets.is_gymnax(self.env)
        if gymnax and self.episode_length is None:
            object.__setattr__(self, "episode_length", _gymnax_episode_length(self.env))
        for name in (
            "episode_length",
            "episodes_per_member",
            "eval_episodes",
            "action_repeat",
            "noise_rank",
            "vbn_reference_size",
        ):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ConfigError(f"{name}: expected an int >= 1, got {value!r}")
        if not _is_int(self.population_size) or self.population_size < 2:
            raise ConfigError(
                f"population_size: expected an int >= 2, got {self.population_size!r}"
            )
        try:  # the runner's own checks of its loop settings
            check_loop(
                self.generations, self.seed, self.eval_every, self.checkpoint_every, self.devices
            )
            check_stops(self.timesteps, self.target_return)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        for name in ("backend", "policy", "noise", "subspace_projection"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name}: expected a string, got {getattr(self, name)!r}")
        self._check_subspace()
        self._check_strategy_settings()
        policies = GYMNAX_POLICIES if gymnax else POLICIES
        if self.policy not in policies:
            raise ConfigError(f"policy: unknown {self.policy!r}; allowed: {list(policies)}")
        sizes = self.hidden_sizes
        if not isinstance(sizes, list | tuple) or not all(_is_int(s) and s >= 1 for s in sizes):
            raise ConfigError(f"hidden_sizes: expected a list of ints >= 1, got {sizes!r}")
        object.__setattr__(self, "hidden_sizes", tuple(sizes))
        if not isinstance(self.normalize_observations, bool):
            raise ConfigError(
                f"normalize_observations: expected true or false, got "
                f"{self.normalize_observations!r}"
            )
        if gymnax:
            _check_gymnax_env(self.env, self.backend)
            return
        try:
            brax_envs.check_env(self.env, self.backend)
        except ValueError as err:
            raise ConfigError(str(err)) from None

    def _fill_from_preset(self) -> None:
        filled = set()
        if self.preset is not None and not isinstance(self.preset, str):
            raise ConfigError(f"preset: expected a name or nothing, got {self.preset!r}")
        try:
            settings = presets.preset(self.env, self.strategy, self.preset)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        for name, value in settings.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
                filled.add(name)
        every, cadence = self.checkpoint_every, self.eval_every
        if "checkpoint_every" in filled and _is_int(cadence) and cadence >= 1 and every % cadence:
            # Checkpoints fall on block ends: the preset's cadence, rounded up to the
            # --eval-every the user chose, rather than an error about a setting they never set.
            object.__setattr__(self, "checkpoint_every", -(-every // cadence) * cadence)
        for name in ("sigma", "learning_rate", "l2_coeff", "fitness_shaping"):
            if getattr(self, name) is None and takes(self.strategy, name):
                object.__setattr__(self, name, strategy_default(self.strategy, name))

    def _check_strategy_settings(self) -> None:
        for name in ("sigma", "learning_rate"):
            object.__setattr__(self, name, _check_number(name, getattr(self, name), 0, False))
        for name in ("l2_coeff", "fitness_shaping"):
            if getattr(self, name) is not None and not takes(self.strategy, name):
                raise ConfigError(
                    f"{name}: {self.strategy} has no {name} setting; strategies with one: "
                    f"{_takers(name)}"
                )
        if self.l2_coeff is not None:
            object.__setattr__(self, "l2_coeff", _check_number("l2_coeff", self.l2_coeff, 0, True))
        shapings = sorted(shaping.SHAPINGS)
        if self.fitness_shaping is not None and self.fitness_shaping not in shapings:
            raise ConfigError(
                f"fitness_shaping: unknown {self.fitness_shaping!r}; allowed: {shapings}"
            )
        if self.noise not in NOISE_SOURCES:
            raise ConfigError(f"noise: unknown {self.noise!r}; allowed: {list(NOISE_SOURCES)}")

    def _check_subspace(self) -> None:
        dim = self.subspace_dim
        if dim is not None and (not _is_int(dim) or dim < 1):
            raise ConfigError(f"subspace_dim: expected an int >= 1 (or unset), got {dim!r}")
        if self.subspace_projection not in subspace_lib.PROJECTIONS:
            raise ConfigError(
                f"subspace_projection: unknown {self.subspace_projection!r}; allowed: "
                f"{list(subspace_lib.PROJECTIONS)}"
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
          jaxes.app.config.ConfigError: run/config.json: missing settings ['backend', ...]
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a JSON object of settings, got {data!r:.60}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(f"{source}: unknown settings {unknown}; allowed: {names}")
        missing = [n for n in names if n not in data and n not in ADDED_LATER]
        if missing:
            raise ConfigError(f"{source}: missing settings {missing}")
        try:
            return cls(**{**{n: v for n, v in ADDED_LATER.items() if n not in data}, **data})
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None


def _gymnax_episode_length(env: str) -> int:
    """gymnax's own time limit of ``env`` (or a ``ConfigError`` if gymnax cannot build it)."""
    from jaxes.tasks.gymnax import envs as gymnax_envs

    try:
        return int(gymnax_envs.load_env(env)[1].max_steps_in_episode)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _check_gymnax_env(env: str, backend: str) -> None:
    """A gymnax env: no physics backend, and spaces a gymnax task plays."""
    from jaxes.tasks.gymnax import envs as gymnax_envs

    if backend != "gymnax":
        raise ConfigError(
            f"backend: {env} is a gymnax environment, which has no physics backend; leave "
            f"--backend out (got {backend!r})"
        )
    try:
        loaded = gymnax_envs.load_env(env)
        gymnax_envs.action_spec(env, *loaded)
        gymnax_envs.observation_spec(env, *loaded)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _task(config: TrainConfig) -> Task:
    """The Brax or gymnax task of a config."""
    if presets.is_gymnax(config.env):
        from jaxes.tasks.gymnax import gymnax_task

        try:
            return gymnax_task(
                config.env,
                config.policy,
                config.hidden_sizes,
                episodes_per_member=config.episodes_per_member,
                eval_episodes=config.eval_episodes,
                action_repeat=config.action_repeat,
                normalize_observations=config.normalize_observations,
                episode_length=config.episode_length,
                reference_size=config.vbn_reference_size,
            )
        except ValueError as err:
            raise ConfigError(str(err)) from None
    return brax_tasks.brax_task(
        config.env,
        config.backend,
        config.episode_length,
        config.policy,
        config.hidden_sizes,
        episodes_per_member=config.episodes_per_member,
        eval_episodes=config.eval_episodes,
        normalize_observations=config.normalize_observations,
        action_repeat=config.action_repeat,
        reference_size=config.vbn_reference_size,
    )


def read_toml(path: str) -> dict:
    """The settings in a TOML file: any ``TrainConfig`` fields, at the top level. Errors name
    the file and the key (an unknown key, a value of the wrong type, bad TOML).

    Example:
      >>> import os, tempfile
      >>> path = os.path.join(tempfile.mkdtemp(), "hopper.toml")
      >>> with open(path, "w") as f:
      ...     _ = f.write('env = "hopper"\\nsigma = "big"\\n')
      >>> read_toml(path)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.app.config.ConfigError: .../hopper.toml: sigma: expected a finite number > 0, got 'big'
    """
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
    except OSError as err:
        raise ConfigError(f"--config: cannot read {path} ({err.strerror})") from None
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"{path}: unknown settings {unknown}; allowed: {names}")
    try:
        TrainConfig(**data)  # each value checked here, so the error names this file
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    return data


def read_config(path: str) -> TrainConfig:
    """The ``TrainConfig`` in a ``config.json``; errors name the file (and the field)."""
    return TrainConfig.from_dict(rundir.read_json(path), path)


def build(config: TrainConfig) -> tuple[Strategy, Task]:
    """The strategy and the Brax (or gymnax) task a config describes (errors name the bad
    setting).

    Building compiles nothing (the observation size comes from a traced reset).

    Example:
      >>> strategy, task = build(TrainConfig(strategy="pgpe", population_size=8))
      >>> strategy.population_size, type(task.env).__name__
      (8, 'InvertedPendulum')
      >>> build(TrainConfig(population_size=7))  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.app.config.ConfigError: open_es: population_size: antithetic pairs need an even ...
    """
    task = _task(config)
    settings = {
        name: getattr(config, name)
        for name in STRATEGY_SETTINGS
        if getattr(config, name) is not None and takes(config.strategy, name)
    }
    if settings.get("noise") == "lowrank":
        settings["noise"] = noise_lib.lowrank(config.noise_rank)
    try:
        strategy = STRATEGIES[config.strategy](config.population_size, **settings)
    except ValueError as err:
        raise ConfigError(f"{config.strategy}: {err}") from err
    if config.subspace_dim is not None:
        strategy = _in_subspace(strategy, task, config)
    return strategy, task


def _in_subspace(strategy: Strategy, task: Task, config: TrainConfig) -> Strategy:
    """``strategy`` searching a random ``subspace_dim``-dimensional subspace of the policy's
    parameters (``jaxes.subspace``), checked against the policy's size before anything runs."""
    size = trees.num_params(jax.eval_shape(task.init_params, jax.random.key(0)))
    if config.subspace_dim > size:
        raise ConfigError(
            f"subspace_dim: {config.subspace_dim} is more than the policy's {size} parameters; "
            f"use 1 to {size}"
        )
    return subspace_lib.subspace(strategy, config.subspace_dim, config.subspace_projection)
