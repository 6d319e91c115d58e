"""The small functions that check each part of a ``TrainConfig`` (``jaxes.app.config``), and
what they share: which settings a strategy's factory takes, and its defaults."""

from __future__ import annotations

import importlib
import inspect
import math

from jaxes import shaping
from jaxes import subspace as subspace_lib
from jaxes.app import presets
from jaxes.extras import MissingExtra
from jaxes.noise import NOISE_SOURCES
from jaxes.strategies import STRATEGIES
from jaxes.tasks.brax import envs as brax_envs
from jaxes.training.settings import check_loop, check_stops

LEARNING_RATE_MEANING = (
    "Adam's for open_es and guided_es, ClipUp's step for pgpe, η_μ for snes, α for ars, c_m for "
    "sep_cma_es; ga has none"
)
POLICIES = ("linear", "mlp", "vbn_mlp")
# A gymnax env (jaxes.tasks.gymnax) also takes MinAtar's conv networks.
GYMNAX_POLICIES = ("linear", "mlp", "vbn_mlp", "conv", "vbn_conv")
# An unrolled meta-problem (presets.UNROLLED_ENVS) searches its meta-parameters, no policy.
UNROLLED_POLICIES = ("log_step_size",)


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


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Each setting a decay schedules, and the strategies whose factory takes it as an optax
# schedule: σ where the strategy does not adapt it, and the step size of the optax optimizer
# it builds (pgpe's ClipUp keeps no step count, the others' step sizes are not an optimizer's).
# ``NAME_decay`` multiplies NAME by itself every generation, never below ``NAME_limit``.
SCHEDULED = {
    "sigma": ("open_es", "ars", "guided_es", "ga"),
    "learning_rate": ("open_es", "ars", "guided_es"),
}
DECAYS = {f"{name}_decay": name for name in SCHEDULED}
LIMITS = {f"{name}_limit": f"{name}_decay" for name in SCHEDULED}
# Strategies for unrolled meta-problems only (a task that carries each member's inner state
# from one truncation to the next: presets.UNROLLED_ENVS).
UNROLLED = ("pes", "nres")
# Settings only some strategies take; any other strategy refuses them, naming the ones that do.
OPTIONAL = ("l2_coeff", "fitness_shaping", "temperature", "elite_ratio", "lineage", *DECAYS)
OPTIONAL += tuple(LIMITS)


def takes(strategy: str, setting: str) -> bool:
    """Whether the factory of ``strategy`` has the keyword ``setting`` (for a decay or its
    limit: takes the setting it schedules as a schedule, ``SCHEDULED``).

    Example:
      >>> takes("open_es", "l2_coeff"), takes("ars", "fitness_shaping")
      (True, False)
      >>> takes("ars", "sigma_decay"), takes("snes", "learning_rate_limit")
      (True, False)
    """
    scheduled = DECAYS.get(setting) or DECAYS.get(LIMITS.get(setting))
    if scheduled is not None:
        return strategy in SCHEDULED[scheduled]
    return setting in inspect.signature(STRATEGIES[strategy]).parameters


def takers(setting: str) -> list[str]:
    """The strategies that take ``setting`` (``takes``)."""
    return [name for name in STRATEGIES if takes(name, setting)]


def check_number(name: str, value, low: float, inclusive: bool) -> float:
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


def check_env_config(config) -> None:
    """The env's settings: counts >= 1, a policy the env's family plays, and an env that
    exists (Brax with its backend; gymnax with spaces a gymnax task plays)."""
    gymnax = presets.is_gymnax(config.name)
    for name in (
        "episode_length",
        "episodes_per_member",
        "eval_episodes",
        "action_repeat",
        "vbn_reference_size",
    ):
        value = getattr(config, name)
        if not is_int(value) or value < 1:
            raise ConfigError(f"{name}: expected an int >= 1, got {value!r}")
    for name in ("backend", "policy"):
        if not isinstance(getattr(config, name), str):
            raise ConfigError(f"{name}: expected a string, got {getattr(config, name)!r}")
    unrolled = presets.is_unrolled(config.name)
    policies = UNROLLED_POLICIES if unrolled else GYMNAX_POLICIES if gymnax else POLICIES
    if config.policy not in policies:
        raise ConfigError(f"policy: unknown {config.policy!r}; allowed: {list(policies)}")
    sizes = config.hidden_sizes
    if not isinstance(sizes, tuple) or not all(is_int(s) and s >= 1 for s in sizes):
        raise ConfigError(f"hidden_sizes: expected a list of ints >= 1, got {sizes!r}")
    if not isinstance(config.normalize_observations, bool):
        raise ConfigError(
            f"normalize_observations: expected true or false, got {config.normalize_observations!r}"
        )
    if gymnax:
        _check_gymnax_env(config.name, config.backend)
        return
    if unrolled:
        _check_unrolled_env(config)
        return
    check_env_name(config.name)
    try:
        brax_envs.check_env(config.name, config.backend)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def env_names(family: str) -> tuple[list[str], bool]:
    """A family's env names (``"brax"`` or ``"gymnax"``) and whether its extra is installed:
    its own registry's names, or ``presets.ENV_NAMES`` where the extra is missing.

    Example:
      >>> names, installed = env_names("brax")
      >>> "hopper" in names, installed
      (True, True)
    """
    try:
        if family == "brax":
            return brax_envs.env_names(), True
        return importlib.import_module("jaxes.tasks.gymnax.envs").env_names(), True
    except MissingExtra:
        return list(presets.ENV_NAMES[family]), False


def check_env_name(env: str) -> None:
    """``ConfigError`` for a name that is no env of Brax's or gymnax's, whichever extras are
    installed, before anything says to install one: a name with a '-' is gymnax's or none,
    one without is Brax's or none (``presets.is_gymnax``).

    Example:
      >>> check_env_name("hopper")
      >>> check_env_name("nope")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.app.checks.ConfigError: env: no env 'nope'; Brax's are ['ant', ...
    """
    names, _ = env_names("gymnax" if "-" in env else "brax")
    if env in names or presets.is_unrolled(env):
        return
    brax_names, _ = env_names("brax")
    raise ConfigError(
        f"env: no env {env!r}; Brax's are {brax_names}, "
        "gymnax's (CartPole-v1, Breakout-MinAtar, ...) and the unrolled "
        f"{', '.join(presets.UNROLLED_ENVS)} are listed by `jaxes envs`"
    )


def check_loop_config(config) -> None:
    """The loop's settings, with the runner's own checks (``jaxes.training.settings``)."""
    try:
        check_loop(
            config.generations,
            config.seed,
            config.eval_every,
            config.checkpoint_every,
            config.devices,
        )
        check_stops(config.timesteps, config.target_return)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def check_strategy_config(config) -> None:
    """The strategy's settings: each one it takes in range, none it does not take."""
    if config.name not in STRATEGIES:
        raise ConfigError(f"strategy: unknown {config.name!r}; allowed: {sorted(STRATEGIES)}")
    if not is_int(config.population_size) or config.population_size < 2:
        raise ConfigError(f"population_size: expected an int >= 2, got {config.population_size!r}")
    if not is_int(config.noise_rank) or config.noise_rank < 1:
        raise ConfigError(f"noise_rank: expected an int >= 1, got {config.noise_rank!r}")
    for name in ("noise", "subspace_projection"):
        if not isinstance(getattr(config, name), str):
            raise ConfigError(f"{name}: expected a string, got {getattr(config, name)!r}")
    dim = config.subspace_dim
    if dim is not None and (not is_int(dim) or dim < 1):
        raise ConfigError(f"subspace_dim: expected an int >= 1 (or unset), got {dim!r}")
    if config.subspace_projection not in subspace_lib.PROJECTIONS:
        raise ConfigError(
            f"subspace_projection: unknown {config.subspace_projection!r}; allowed: "
            f"{list(subspace_lib.PROJECTIONS)}"
        )
    check_number("sigma", config.sigma, 0, False)
    if takes(config.name, "learning_rate"):
        check_number("learning_rate", config.learning_rate, 0, False)
    elif config.learning_rate is not None:  # ga: its θ is a member it selects, not a step
        raise ConfigError(
            f"learning_rate: {config.name} has no learning_rate setting; strategies with one: "
            f"{takers('learning_rate')}"
        )
    for name in OPTIONAL:
        if getattr(config, name) is not None and not takes(config.name, name):
            raise ConfigError(
                f"{name}: {config.name} has no {name} setting; strategies with one: {takers(name)}"
            )
    if config.l2_coeff is not None:
        check_number("l2_coeff", config.l2_coeff, 0, True)
    shapings = sorted(shaping.SHAPINGS)
    if config.fitness_shaping is not None and config.fitness_shaping not in shapings:
        raise ConfigError(
            f"fitness_shaping: unknown {config.fitness_shaping!r}; allowed: {shapings}"
        )
    if config.noise not in NOISE_SOURCES:
        raise ConfigError(f"noise: unknown {config.noise!r}; allowed: {list(NOISE_SOURCES)}")
    _check_temperature(config.temperature, config.fitness_shaping)
    if config.elite_ratio is not None:
        _check_fraction("elite_ratio", config.elite_ratio)
    if config.lineage is not None and (not is_int(config.lineage) or config.lineage < 1):
        raise ConfigError(f"lineage: expected an int >= 1 (or unset), got {config.lineage!r}")
    _check_schedules(config)


def check_lineage(lineage, generations) -> None:
    """A seed-list GA updates ``lineage`` times at most (``jaxes.ga``'s "At G"), so a run
    must not ask for more generations than that: the rest would change nothing."""
    if lineage is not None and lineage < generations:
        raise ConfigError(
            f"lineage: ga keeps seed lists of at most {lineage} generations and then stops "
            f"updating, fewer than generations={generations}; give a lineage >= {generations}, "
            "or leave it out to keep the parents as parameters"
        )


def _check_fraction(name: str, value) -> None:
    """A number in ``(0, 1]``: a decay's factor, an elite ratio."""
    if check_number(name, value, 0, False) > 1:
        raise ConfigError(f"{name}: expected a number in (0, 1], got {value!r}")


def _check_temperature(temperature, fitness_shaping) -> None:
    """snes's temperature: >= 0 (0 keeps the log-rank utilities); above 0 it replaces them,
    so no other shaping may be asked for with it."""
    if temperature is None or check_number("temperature", temperature, 0, True) == 0:
        return
    if fitness_shaping != "log_rank":
        raise ConfigError(
            "temperature, fitness_shaping: a temperature > 0 replaces snes's log-rank "
            f"utilities with the DES weights, so fitness_shaping must stay log_rank (got "
            f"{fitness_shaping!r}); give one of them"
        )


def _check_schedules(config) -> None:
    """Each decay in ``(0, 1]``; each limit > 0, at most the value it floors, and given only
    with its decay (alone it would change nothing)."""
    for decay in DECAYS:
        if getattr(config, decay) is not None:
            _check_fraction(decay, getattr(config, decay))
    for limit, decay in LIMITS.items():
        value = getattr(config, limit)
        if value is None:
            continue
        if getattr(config, decay) is None:
            raise ConfigError(f"{limit}: the floor of a decaying {DECAYS[decay]}; give {decay} too")
        initial = getattr(config, DECAYS[decay])
        if check_number(limit, value, 0, False) > initial:
            raise ConfigError(
                f"{limit}: expected a number in (0, {DECAYS[decay]}={initial:g}], got {value!r}"
            )


def gymnax_episode_length(env: str) -> int:
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


def check_pairing(env: str, strategy: str) -> None:
    """``pes`` and ``nres`` run only on an unrolled meta-problem: their estimates are for
    inner states carried from one generation to the next."""
    if strategy in UNROLLED and not presets.is_unrolled(env):
        raise ConfigError(
            f"strategy: {strategy} estimates gradients of unrolled meta-problems, whose inner "
            f"states carry over between generations; {env} is an episodic env, so use --env "
            f"{' or '.join(presets.UNROLLED_ENVS)}, or call jaxes.{strategy} from Python "
            "(jaxes.tasks.unrolled)"
        )


def _check_unrolled_env(config) -> None:
    """An unrolled meta-problem: no backend, one unroll per member and per evaluation, no
    observations, and an unroll (``episode_length`` inner steps) of whole truncations."""
    name, k = config.name, presets.UNROLLED_TRUNCATION
    if config.backend != "unrolled":
        raise ConfigError(
            f"backend: {name} is an unrolled meta-problem, which has no physics backend; leave "
            f"--backend out (got {config.backend!r})"
        )
    for setting in ("episodes_per_member", "action_repeat", "eval_episodes"):
        if getattr(config, setting) != 1:
            raise ConfigError(
                f"{setting}: {name} runs one unroll per member and per evaluation, with no "
                f"actions to repeat; leave it at 1 (got {getattr(config, setting)})"
            )
    if config.normalize_observations:
        raise ConfigError(f"normalize_observations: {name} has no observations; leave it false")
    if config.episode_length % k:
        raise ConfigError(
            f"episode_length: {name} runs its unroll {k} inner steps a generation, so the "
            f"unroll must be a multiple of {k} (got {config.episode_length})"
        )
