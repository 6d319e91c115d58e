"""The settings `jaxes train` takes for NeuroEvoBench's tuned strategies (issue 60): σ and
step-size decays, snes's temperature and the CMA-ES elite ratio, from a `TrainConfig` to the
strategy it builds; their `config.json` round trip, and runs written before them."""

import inspect
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxes.app import build as build_lib
from jaxes.app import checks
from jaxes.app import config as config_lib
from jaxes.app.config import TrainConfig
from jaxes.strategies import STRATEGIES
from jaxes.training import rundir

NEW = ("temperature", "elite_ratio", "sigma_decay", "sigma_limit", "learning_rate_decay")
NEW += ("learning_rate_limit", "lineage")
GENERATIONS = 10


def strategy_of(**settings):
    """The strategy `jaxes train` builds for these settings (P = 4)."""
    config = TrainConfig.make(env="fast", population_size=4, **settings)
    return build_lib._strategy(config.strategy)


def told(strategy):
    """Each generation's info over ``GENERATIONS`` tells from ``ones(3)`` on a linear fitness,
    one jitted scan. A linear fitness ranks members by their noise alone, so runs with the
    same keys see the same ranks whatever their θ."""

    def generation(state, key):
        population, state = strategy.ask(key, state)
        return strategy.tell(state, jnp.sum(population, axis=1))

    state = strategy.init(jax.random.key(0), jnp.ones(3))
    keys = jax.random.split(jax.random.key(1), GENERATIONS)
    return jax.jit(lambda s: jax.lax.scan(generation, s, keys))(state)[1]


@pytest.mark.parametrize("name", ["open_es", "ars"])
def test_sigma_and_learning_rate_decay_every_generation_down_to_their_limits(name):
    g = np.arange(GENERATIONS)
    decayed_sigma = told(strategy_of(strategy=name, sigma=0.038, sigma_decay=0.9, sigma_limit=0.02))
    np.testing.assert_allclose(decayed_sigma.sigma, np.maximum(0.038 * 0.9**g, 0.02), rtol=1e-6)
    # With σ constant the steps differ only by the step size (Adam's and SGD's step is linear in
    # it, and both runs' directions are the same): their ratio is the decay.
    lr = {"learning_rate": 0.022}
    steady = told(strategy_of(strategy=name, **lr))
    decayed = told(
        strategy_of(strategy=name, learning_rate_decay=0.9, learning_rate_limit=0.015, **lr)
    )
    assert bool(jnp.all(steady.applied)) and bool(jnp.all(decayed.applied))
    np.testing.assert_allclose(steady.sigma, 0.05, rtol=1e-6)
    np.testing.assert_allclose(
        decayed.update_norm / steady.update_norm, np.maximum(0.9**g, 0.015 / 0.022), rtol=1e-5
    )


def test_a_decay_of_one_is_the_constant_and_the_schedules_are_optax_exponential_decays():
    assert build_lib.decayed(0.05, 1.0, 0.01) == 0.05  # the state as without a decay
    schedule = build_lib.decayed(0.038, 0.999, None)
    np.testing.assert_allclose(schedule(1000), 0.038 * 0.999**1000, rtol=1e-4)  # float32


def test_the_strategies_said_to_take_a_schedule_take_one_and_the_others_refuse_it():
    """``checks.SCHEDULED`` is what the factories do: each strategy it names builds with the
    setting as an optax schedule, each other one refuses it at construction."""
    schedule = optax.exponential_decay(0.05, 1, 0.9)
    for setting, takers in checks.SCHEDULED.items():
        for name, factory in STRATEGIES.items():
            if name in takers:
                factory(8, **{setting: schedule})
            elif setting not in inspect.signature(factory).parameters:
                continue  # no such setting at all (ga has no step size)
            else:
                with pytest.raises(ValueError, match=f"^{setting}: "):
                    factory(8, **{setting: schedule})


def test_the_neuroevobench_settings_build_and_round_trip_through_config_json():
    configs = [
        TrainConfig.make(strategy="snes", sigma=0.119, temperature=30),
        TrainConfig.make(strategy="sep_cma_es", sigma=0.094, elite_ratio=0.1),
        TrainConfig.make(
            sigma=0.038, sigma_decay=0.999, learning_rate=0.022, learning_rate_decay=0.999
        ),
    ]
    for config in configs:
        saved = json.loads(config.to_json())
        assert set(NEW) <= set(saved)
        assert TrainConfig.from_dict(saved) == config
    assert json.loads(configs[0].to_json())["temperature"] == 30.0  # recorded as a float
    assert [c.strategy.elite_ratio for c in configs] == [None, 0.1, None]
    snes = build_lib._strategy(configs[0].strategy)
    assert snes.traits.name == "snes" and snes.population_size == 32


def test_a_run_written_before_the_new_settings_is_still_the_same_run(tmp_path):
    """A ``config.json`` without the new keys reads as their old meaning (none), and the
    runner admits the run again: its settings are recorded without them."""
    config = TrainConfig.make(env="fast", strategy="snes")
    old = {k: v for k, v in config.to_dict().items() if k not in NEW}
    path = tmp_path / rundir.CONFIG
    path.write_text(json.dumps(old))
    assert TrainConfig.from_dict(old) == config
    with pytest.raises(rundir.RunDirError, match="missing settings"):
        rundir.open_run(str(tmp_path), config.to_dict(), resume=False)  # what it was refused
    assert rundir.open_run(str(tmp_path), config_lib.recorded(config, str(path)), False) == (
        "restart"
    )
    assert json.loads(path.read_text()) == old  # the file keeps its keys
    # A new setting given to the old run is a change the runner refuses, naming it.
    hotter = config.replace(temperature=30.0)
    with pytest.raises(rundir.RunDirError, match="missing settings \\['temperature'\\]"):
        rundir.open_run(str(tmp_path), config_lib.recorded(hotter, str(path)), resume=True)


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"temperature": 30.0},
            "temperature: open_es has no temperature setting; strategies with one: ['snes']",
        ),
        (
            {"strategy": "sep_cma_es", "learning_rate_decay": 0.999},
            "learning_rate_decay: sep_cma_es has no learning_rate_decay setting; strategies "
            "with one: ['open_es', 'ars', 'guided_es']",
        ),
        (
            {"strategy": "snes", "sigma_decay": 0.999},
            "sigma_decay: snes has no sigma_decay setting; strategies with one: ['open_es', 'ars'",
        ),
        (
            {"strategy": "pgpe", "elite_ratio": 0.1},
            "elite_ratio: pgpe has no elite_ratio setting; strategies with one: "
            "['sep_cma_es', 'cma_es'",  # and any later strategy with one
        ),
        ({"sigma_limit": 0.01}, "sigma_limit: the floor of a decaying sigma; give sigma_decay"),
        (
            {"learning_rate_decay": 0.9, "learning_rate_limit": 0.5},
            "learning_rate_limit: expected a number in (0, learning_rate=0.03], got 0.5",
        ),
        ({"sigma_decay": 1.5}, "sigma_decay: expected a number in (0, 1], got 1.5"),
        ({"sigma_decay": 0}, "sigma_decay: expected a finite number > 0, got 0"),
        ({"strategy": "cma_es", "elite_ratio": 2}, "elite_ratio: expected a number in (0, 1]"),
        ({"strategy": "snes", "temperature": -1}, "temperature: expected a finite number >= 0"),
        (
            {"strategy": "snes", "temperature": 30, "fitness_shaping": "z_score"},
            "temperature, fitness_shaping: a temperature > 0 replaces snes's log-rank",
        ),
    ],
)
def test_a_setting_the_strategy_does_not_take_or_a_missing_one_is_named(settings, message):
    with pytest.raises(config_lib.ConfigError) as caught:
        TrainConfig.make(env="fast", **settings)
    assert message in str(caught.value) and "\n" not in str(caught.value)
