"""The settings of a training run (``TrainConfig``): what is trained (``EnvConfig``), by which
strategy (``StrategyConfig``) and for how long (``LoopConfig``).

``TrainConfig.make(**settings)`` takes the settings by their flat names (``jaxes train``'s
flags, ``config.json``'s keys, which ``to_dict`` and ``from_dict`` keep), fills what is not
given from the env's preset, and checks each part with its own small function, so a bad
setting fails before anything is written, with a message that names it (and the file).
"""

from __future__ import annotations

import dataclasses
import json
import os

from jaxes.app import presets
from jaxes.app.checks import (
    DECAYS,
    LIMITS,
    ConfigError,
    check_env_config,
    check_env_name,
    check_lineage,
    check_loop_config,
    check_number,
    check_pairing,
    check_strategy_config,
    gymnax_episode_length,
    is_int,
    strategy_default,
    takes,
)
from jaxes.strategies import STRATEGIES
from jaxes.training import rundir


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """What is trained: the env, its policy, and how members and the centre are scored.

    Attributes:
      name: a Brax env, a gymnax one (``CartPole-v1``) or a meta-problem (``meta_step_size``).
      backend: Brax's physics backend; ``"gymnax"`` or ``"unrolled"`` for those families.
      episode_length: steps per episode (gymnax's own limit by default; inner steps an unroll).
      policy: ``linear``, ``mlp``, ``vbn_mlp`` (gymnax also ``conv``, ``vbn_conv``; a
        meta-problem ``log_step_size``).
      hidden_sizes: the MLP's hidden layers.
      episodes_per_member: episodes averaged per member's fitness.
      action_repeat: env steps per policy decision.
      vbn_reference_size: observations in the VBN reference batch.
      eval_episodes: episodes per evaluation of the centre.
      normalize_observations: keep running observation statistics.
    """

    name: str
    backend: str
    episode_length: int
    policy: str
    hidden_sizes: tuple[int, ...]
    episodes_per_member: int
    action_repeat: int
    vbn_reference_size: int
    eval_episodes: int
    normalize_observations: bool

    def __post_init__(self):
        check_env_config(self)


@dataclasses.dataclass(frozen=True)
class StrategyConfig:
    """The strategy and its settings (``None``: a setting the strategy does not take).

    Attributes:
      name: a key of ``jaxes.strategies.STRATEGIES``.
      population_size: ``P``.
      sigma, learning_rate, l2_coeff, fitness_shaping: the factory's keywords.
      noise, noise_rank: the noise source by name (``noise_rank``: its rank for ``lowrank``).
      subspace_dim, subspace_projection: search a random subspace of this many dimensions
        (``jaxes.subspace``), or the whole parameter space (``None``).
      temperature: snes's DES weights at this temperature (``None`` or 0: log-rank utilities).
      elite_ratio: the share of the population sep_cma_es, cma_es, ma_es and lm_ma_es
        recombine (ga: keeps as parents).
      lineage: ga's parents as seed lists of at most this many generations (``jaxes.ga``).
      sigma_decay, learning_rate_decay: σ and the step size times this factor every
        generation (``None``: constant; open_es, ars), never below ``sigma_limit`` and
        ``learning_rate_limit`` (``None``: no floor but the strategy's own).
    """

    name: str
    population_size: int
    sigma: float
    learning_rate: float | None
    l2_coeff: float | None
    fitness_shaping: str | None
    noise: str
    noise_rank: int
    subspace_dim: int | None
    subspace_projection: str
    temperature: float | None
    elite_ratio: float | None
    lineage: int | None
    sigma_decay: float | None
    sigma_limit: float | None
    learning_rate_decay: float | None
    learning_rate_limit: float | None

    def __post_init__(self):
        check_strategy_config(self)


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """How long and how the run goes (``jaxes.training.run``'s keywords).

    Attributes:
      generations, seed, eval_every, checkpoint_every, devices: the loop.
      timesteps, target_return: stop earlier at this many env steps, or at this return.
    """

    generations: int
    seed: int
    eval_every: int
    checkpoint_every: int
    timesteps: int | None
    target_return: float | None
    devices: int

    def __post_init__(self):
        check_loop_config(self)


# Settings added after runs were first written, and what a config.json without one meant
# (the default then, not the env's preset now).
ADDED_LATER = {
    "noise_rank": 1,
    "vbn_reference_size": 128,
    "subspace_dim": None,
    "subspace_projection": "dense",
    "preset": None,
    "temperature": None,
    "elite_ratio": None,
    "lineage": None,
    "sigma_decay": None,
    "sigma_limit": None,
    "learning_rate_decay": None,
    "learning_rate_limit": None,
}


# Each flat setting (a flag, a config.json key) and the part and field that hold it, in the
# order config.json lists them.
FIELDS: dict[str, tuple[str, str]] = {
    "env": ("env", "name"),
    "preset": ("", "preset"),
    "backend": ("env", "backend"),
    "episode_length": ("env", "episode_length"),
    "strategy": ("strategy", "name"),
    "population_size": ("strategy", "population_size"),
    "sigma": ("strategy", "sigma"),
    "learning_rate": ("strategy", "learning_rate"),
    "sigma_decay": ("strategy", "sigma_decay"),
    "sigma_limit": ("strategy", "sigma_limit"),
    "learning_rate_decay": ("strategy", "learning_rate_decay"),
    "learning_rate_limit": ("strategy", "learning_rate_limit"),
    "temperature": ("strategy", "temperature"),
    "elite_ratio": ("strategy", "elite_ratio"),
    "lineage": ("strategy", "lineage"),
    "l2_coeff": ("strategy", "l2_coeff"),
    "fitness_shaping": ("strategy", "fitness_shaping"),
    "noise": ("strategy", "noise"),
    "noise_rank": ("strategy", "noise_rank"),
    "generations": ("loop", "generations"),
    "seed": ("loop", "seed"),
    "policy": ("env", "policy"),
    "hidden_sizes": ("env", "hidden_sizes"),
    "episodes_per_member": ("env", "episodes_per_member"),
    "action_repeat": ("env", "action_repeat"),
    "vbn_reference_size": ("env", "vbn_reference_size"),
    "subspace_dim": ("strategy", "subspace_dim"),
    "subspace_projection": ("strategy", "subspace_projection"),
    "eval_every": ("loop", "eval_every"),
    "eval_episodes": ("env", "eval_episodes"),
    "checkpoint_every": ("loop", "checkpoint_every"),
    "normalize_observations": ("env", "normalize_observations"),
    "timesteps": ("loop", "timesteps"),
    "target_return": ("loop", "target_return"),
    "devices": ("loop", "devices"),
}
# What a setting is when neither the caller nor the env's preset gives it.
UNSET = {
    "env": "inverted_pendulum",
    "strategy": "open_es",
    "seed": 0,
    "episodes_per_member": 1,
    "action_repeat": 1,
    "subspace_projection": "dense",
    "devices": 0,
}
PARTS = {"env": EnvConfig, "strategy": StrategyConfig, "loop": LoopConfig}
# Numbers only some strategies take, unset by default.
OPTIONAL_NUMBERS = ("temperature", "elite_ratio", *DECAYS, *LIMITS)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every setting of a run, in three parts; saved as ``config.json`` in the run directory.

    Make one with ``TrainConfig.make(**settings)`` (flat names): a setting left out is filled
    from the env's preset (``jaxes.app.presets``; with ``preset=NAME``, the named row
    ``presets.NAMED[NAME][env]`` laid over it), then from the strategy's own defaults:
    ``TrainConfig.make(env="hopper")`` is what ``jaxes train --env hopper`` runs.
    ``timesteps`` and ``target_return`` stay ``None`` (no limit) unless given.

    Example:
      >>> TrainConfig.make(strategy="snes").strategy.learning_rate
      1.0
      >>> config = TrainConfig.make(env="swimmer")
      >>> config.env.backend, config.replace(sigma=0.1).strategy.sigma
      ('generalized', 0.1)
      >>> TrainConfig.make(seed=2**31)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.app.checks.ConfigError: seed: expected an int in [0, 2147483647], got 2147483648
    """

    env: EnvConfig
    strategy: StrategyConfig
    loop: LoopConfig
    preset: str | None = None

    @classmethod
    def make(cls, **settings) -> TrainConfig:
        """The config of ``settings`` (flat names, ``FIELDS``), filled and checked."""
        unknown = sorted(set(settings) - set(FIELDS))
        if unknown:
            raise ConfigError(f"unknown settings {unknown}; allowed: {list(FIELDS)}")
        flat = _filled({**UNSET, **{k: v for k, v in settings.items() if v is not None}})
        parts = {part: {} for part in PARTS}
        for name, (part, field) in FIELDS.items():
            if part:
                parts[part][field] = flat.get(name)
        built = {part: kind(**parts[part]) for part, kind in PARTS.items()}
        check_lineage(built["strategy"].lineage, built["loop"].generations)  # across two parts
        return cls(**built, preset=flat.get("preset"))

    def get(self, name: str):
        """The setting named ``name`` (a flat name, ``FIELDS``)."""
        part, field = FIELDS[name]
        return getattr(getattr(self, part) if part else self, field)

    def replace(self, **changes) -> TrainConfig:
        """This config with ``changes`` (flat names), checked again; the other settings keep
        their values (the preset is not read again)."""
        return TrainConfig.make(**{**self.to_dict(), **changes})

    def to_dict(self) -> dict:
        """The settings by flat name, as JSON-ready values (what ``config.json`` holds)."""
        data = {name: self.get(name) for name in FIELDS}
        data["hidden_sizes"] = list(data["hidden_sizes"])
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
          jaxes.app.checks.ConfigError: run/config.json: missing settings ['backend', ...]
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a JSON object of settings, got {data!r:.60}")
        names = list(FIELDS)
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(f"{source}: unknown settings {unknown}; allowed: {names}")
        missing = [n for n in names if n not in data and n not in ADDED_LATER]
        if missing:
            raise ConfigError(f"{source}: missing settings {missing}")
        try:
            return cls.make(**{**{n: v for n, v in ADDED_LATER.items() if n not in data}, **data})
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None


def _filled(settings: dict) -> dict:
    """``settings`` with what is missing taken from the env's preset, then from the
    strategy's defaults, and with numbers and sizes in the types a config holds."""
    for name in ("env", "strategy"):
        if not isinstance(settings[name], str):
            raise ConfigError(f"{name}: expected a string, got {settings[name]!r}")
    env, strategy = settings["env"], settings["strategy"]
    check_env_name(env)  # before the preset, which may ask for an extra the env needs
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy: unknown {strategy!r}; allowed: {sorted(STRATEGIES)}")
    check_pairing(env, strategy)
    preset = settings.get("preset")
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(f"preset: expected a name or nothing, got {preset!r}")
    try:
        table = presets.preset(env, strategy, preset)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    # A preset's step size that the strategy does not take is left out (pes has no l2_coeff).
    dropped = {k for k in presets.STEP_SIZE_SETTINGS if not takes(strategy, k)}
    filled = {k: v for k, v in table.items() if k not in settings and k not in dropped}
    settings = {**settings, **filled}
    every, cadence = settings.get("checkpoint_every"), settings.get("eval_every")
    if "checkpoint_every" in filled and is_int(cadence) and cadence >= 1 and every % cadence:
        # Checkpoints fall on block ends: the preset's cadence, rounded up to the
        # --eval-every the user chose, rather than an error about a setting they never set.
        settings["checkpoint_every"] = -(-every // cadence) * cadence
    for name in ("sigma", "learning_rate", "l2_coeff", "fitness_shaping"):
        if settings.get(name) is None and takes(strategy, name):
            settings[name] = strategy_default(strategy, name)
    if presets.is_gymnax(env) and settings.get("episode_length") is None:
        settings["episode_length"] = gymnax_episode_length(env)
    settings["sigma"] = check_number("sigma", settings.get("sigma"), 0, False)
    if takes(strategy, "learning_rate"):  # ga has none: check_strategy_config names one given
        rate = settings.get("learning_rate")
        settings["learning_rate"] = check_number("learning_rate", rate, 0, False)
    if settings.get("l2_coeff") is not None and takes(strategy, "l2_coeff"):
        settings["l2_coeff"] = check_number("l2_coeff", settings["l2_coeff"], 0, True)
    for name in OPTIONAL_NUMBERS:  # a TOML's `temperature = 30` is recorded as 30.0
        if is_int(settings.get(name)):
            settings[name] = float(settings[name])
    if isinstance(settings.get("hidden_sizes"), list):
        settings["hidden_sizes"] = tuple(settings["hidden_sizes"])
    return settings


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
      jaxes.app.checks.ConfigError: .../hopper.toml: sigma: expected a finite number > 0, got 'big'
    """
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
    except OSError as err:
        raise ConfigError(f"--config: cannot read {path} ({err.strerror})") from None
    try:
        TrainConfig.make(**data)  # each value checked here, so the error names this file
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    return data


def recorded(config: TrainConfig, path: str) -> dict:
    """``config``'s settings (``to_dict``) as the run whose ``config.json`` is ``path`` keeps
    them: all of them for a new run; for a run written before a setting was added
    (``ADDED_LATER``), without that setting where it still has the value the file meant, so
    the run resumes (the runner refuses any setting its file lacks) and its file keeps its keys.
    A value that differs from the one meant is kept, and the runner refuses the change.

    Example:
      >>> import json, os, tempfile
      >>> config = TrainConfig.make(env="fast")
      >>> path = os.path.join(tempfile.mkdtemp(), "config.json")
      >>> "temperature" in recorded(config, path)  # a new run records every setting
      True
      >>> with open(path, "w") as f:
      ...     json.dump({k: v for k, v in config.to_dict().items() if k != "temperature"}, f)
      >>> "temperature" in recorded(config, path)
      False
    """
    settings = config.to_dict()
    saved = rundir.read_json(path) if os.path.isfile(path) else None
    if not isinstance(saved, dict):
        return settings  # a new run, or a file that is not an object (the runner names it)
    return {
        name: value
        for name, value in settings.items()
        if name in saved or name not in ADDED_LATER or value != ADDED_LATER[name]
    }


def read_config(path: str) -> TrainConfig:
    """The ``TrainConfig`` in a ``config.json``; errors name the file (and the field)."""
    return TrainConfig.from_dict(rundir.read_json(path), path)
