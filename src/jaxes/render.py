"""An HTML replay of one episode of a run's centre policy (Brax's three.js viewer)."""

from __future__ import annotations

import contextlib
import io
import warnings

import jax

from jaxes import running_stats


def rollout_states(task, config, state, seed: int = 0):
    """Pipeline states of one noise-free episode (until done or ``episode_length``).

    Example (skipped in doctests: it needs a trained run and compiles a Brax step, ~10 s):
      >>> from jaxes.train import load_run
      >>> config, _, task, _, state = load_run("runs/pendulum")  # doctest: +SKIP
      >>> states, episode_return = rollout_states(task, config, state)  # doctest: +SKIP
      >>> len(states) <= config.episode_length + 1  # doctest: +SKIP
      True
    """
    env, policy = task.env, task.policy
    params = state.strategy_state.params
    stats = state.task_state.obs_stats

    def act(env_state):
        obs = env_state.obs
        if config.normalize_observations:
            obs = running_stats.normalize(stats, obs)
        return env.step(env_state, policy.apply(params, obs))

    step = jax.jit(act)
    env_state = jax.jit(env.reset)(jax.random.key(seed))
    states, total = [env_state.pipeline_state], 0.0
    for _ in range(config.episode_length):
        env_state = step(env_state)
        states.append(env_state.pipeline_state)
        total += float(env_state.reward)
        if float(env_state.done) > 0:
            break
    return states, total


def replay_html(task, config, state, seed: int = 0) -> tuple[str, float, int]:
    """The replay page as a string (for ``IPython.display.HTML``), the return and the length.

    The page loads Brax's viewer script from a CDN, so it needs network access to show.

    Example (skipped in doctests: it needs a trained run and compiles a Brax step, ~10 s):
      >>> from jaxes.train import load_run
      >>> config, _, task, _, state = load_run("runs/pendulum")  # doctest: +SKIP
      >>> page, ret, length = replay_html(task, config, state)  # doctest: +SKIP
      >>> page.startswith("<html>")  # doctest: +SKIP
      True
    """
    states, total = rollout_states(task, config, state, seed)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        from brax.io import html

        page = html.render(task.env.sys.tree_replace({"opt.timestep": task.env.dt}), states)
    return page, total, len(states) - 1


def write_replay(task, config, state, path: str, seed: int = 0) -> tuple[float, int]:
    """Writes the replay to ``path``; returns the episode's return and length.

    Example (skipped in doctests: it needs a trained run and compiles a Brax step, ~10 s):
      >>> from jaxes.train import load_run
      >>> config, _, task, _, state = load_run("runs/pendulum")  # doctest: +SKIP
      >>> ret, length = write_replay(task, config, state, "replay.html")  # doctest: +SKIP
      >>> length <= config.episode_length  # doctest: +SKIP
      True
    """
    page, total, length = replay_html(task, config, state, seed)
    with open(path, "w") as f:
        f.write(page)
    return total, length
