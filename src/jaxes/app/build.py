"""The strategy and the task a ``TrainConfig`` describes (``build``)."""

from __future__ import annotations

import jax
import optax

from jaxes import noise as noise_lib
from jaxes import subspace as subspace_lib
from jaxes import trees
from jaxes.app import presets
from jaxes.app.checks import SCHEDULED, ConfigError, takes
from jaxes.app.config import EnvConfig, StrategyConfig, TrainConfig
from jaxes.strategies import STRATEGIES
from jaxes.tasks import brax as brax_tasks
from jaxes.types import Strategy, Task

# Settings a strategy factory may take; each is passed only to the factories that have it.
STRATEGY_SETTINGS = (
    "sigma",
    "learning_rate",
    "l2_coeff",
    "fitness_shaping",
    "noise",
    "temperature",
    "elite_ratio",
    "lineage",
)
# What jaxes train always gives a factory. Guided ES guides with its own past steps (Meier et
# al. 2019), the one surrogate gradient a run has, at α = 0.95 (benchmarks/guided_es.py's
# best; at the factory's 0.5 the default task, 5 parameters, missed 950 in 25 generations).
TRAIN_SETTINGS = {"guided_es": {"past_steps": True, "alpha": 0.95}}


def build(config: TrainConfig) -> tuple[Strategy, Task]:
    """The strategy and the Brax, gymnax or unrolled task a config describes (errors name the
    bad setting).

    Building compiles nothing (the observation size comes from a traced reset).

    Example:
      >>> strategy, task = build(TrainConfig.make(strategy="pgpe", population_size=8))
      >>> strategy.population_size, type(task.env).__name__
      (8, 'InvertedPendulum')
      >>> build(TrainConfig.make(population_size=7))  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.app.checks.ConfigError: open_es: population_size: antithetic pairs need an even ...
    """
    task = _task(config.env, config.strategy.population_size)
    strategy = _strategy(config.strategy, config.env)
    if config.strategy.subspace_dim is not None:
        strategy = _in_subspace(strategy, task, config.strategy)
    return strategy, task


def _strategy(config: StrategyConfig, env: EnvConfig | None = None) -> Strategy:
    """The strategy of a config, with each setting its factory takes (pes and nres: the
    meta-problem's unroll and truncation lengths)."""
    settings = {
        name: getattr(config, name)
        for name in STRATEGY_SETTINGS
        if getattr(config, name) is not None and takes(config.name, name)
    }
    settings.update(TRAIN_SETTINGS.get(config.name, {}))
    if env is not None and presets.is_unrolled(env.name) and takes(config.name, "unroll_length"):
        settings["unroll_length"] = env.episode_length
        settings["truncation_length"] = presets.UNROLLED_TRUNCATION
    if settings.get("noise") == "lowrank":
        settings["noise"] = noise_lib.lowrank(config.noise_rank)
    for name in SCHEDULED:  # a decay and its limit, as the schedule the factory takes
        rate = getattr(config, f"{name}_decay")
        if rate is not None:
            settings[name] = decayed(settings[name], rate, getattr(config, f"{name}_limit"))
    try:
        return STRATEGIES[config.name](config.population_size, **settings)
    except ValueError as err:
        raise ConfigError(f"{config.name}: {err}") from err


def decayed(initial: float, rate: float, limit: float | None):
    """``initial · rate^g`` at step ``g`` (an optax schedule), never below ``limit``; a rate of
    1 is the constant itself, so the strategy's state is what it is without a decay.

    Example:
      >>> schedule = decayed(0.1, 0.5, 0.02)
      >>> [round(float(schedule(g)), 4) for g in (0, 1, 2, 5)]
      [0.1, 0.05, 0.025, 0.02]
      >>> decayed(0.1, 1.0, None)
      0.1
    """
    if rate == 1:
        return initial
    return optax.exponential_decay(initial, transition_steps=1, decay_rate=rate, end_value=limit)


def _in_subspace(strategy: Strategy, task: Task, config: StrategyConfig) -> Strategy:
    """``strategy`` searching a random ``subspace_dim``-dimensional subspace of the policy's
    parameters (``jaxes.subspace``), checked against the policy's size before anything runs."""
    size = trees.num_params(jax.eval_shape(task.init_params, jax.random.key(0)))
    if config.subspace_dim > size:
        raise ConfigError(
            f"subspace_dim: {config.subspace_dim} is more than the policy's {size} parameters; "
            f"use 1 to {size}"
        )
    return subspace_lib.subspace(strategy, config.subspace_dim, config.subspace_projection)


def _task(config: EnvConfig, population_size: int) -> Task:
    """The Brax, gymnax or unrolled task of an env config."""
    if presets.is_unrolled(config.name):
        from jaxes.tasks.unrolled import step_size_task

        return step_size_task(
            population_size,
            unroll_length=config.episode_length,
            truncation_length=presets.UNROLLED_TRUNCATION,
            start_scale=0.1,
        )
    shared = {
        "episodes_per_member": config.episodes_per_member,
        "eval_episodes": config.eval_episodes,
        "action_repeat": config.action_repeat,
        "normalize_observations": config.normalize_observations,
        "reference_size": config.vbn_reference_size,
    }
    if presets.is_gymnax(config.name):
        from jaxes.tasks.gymnax import gymnax_task

        try:
            return gymnax_task(
                config.name,
                config.policy,
                config.hidden_sizes,
                episode_length=config.episode_length,
                **shared,
            )
        except ValueError as err:
            raise ConfigError(str(err)) from None
    return brax_tasks.brax_task(
        config.name,
        config.backend,
        config.episode_length,
        config.policy,
        config.hidden_sizes,
        **shared,
    )
