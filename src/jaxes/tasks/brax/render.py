"""An HTML replay of one episode of a policy (Brax's three.js viewer)."""

from __future__ import annotations

import contextlib
import io
import warnings

import jax

from jaxes.extras import require


def rollout_states(task, params, task_state, episode_length: int, key: jax.Array):
    """Pipeline states of one noise-free episode of the policy ``params`` (until done or
    ``episode_length`` steps) and its return.

    It plays the first episode ``task.evaluate_policy(key, params, task_state)`` plays,
    through the task's own ``act`` (the same observation normalisation as training and
    evaluation). A run's policy is its centre: ``jaxes.centre(state.strategy_state)`` with
    ``state.task_state``.

    Example (skipped in doctests: it needs a trained run and compiles a Brax step, ~10 s):
      >>> import jaxes
      >>> from jaxes.app.train import load_run
      >>> config, _, task, _, state = load_run("runs/pendulum")  # doctest: +SKIP
      >>> params = jaxes.centre(state.strategy_state)  # doctest: +SKIP
      >>> states, ret = rollout_states(
      ...     task, params, state.task_state, 100, jax.random.key(0)
      ... )  # doctest: +SKIP
      >>> len(states) <= 101  # doctest: +SKIP
      True
    """
    env = task.env

    def step(env_state):
        return env.step(env_state, task.act(params, env_state.obs, task_state))

    step = jax.jit(step)
    env_state = jax.jit(env.reset)(jax.random.split(key, 1)[0])
    states, total = [env_state.pipeline_state], 0.0
    for _ in range(episode_length):
        env_state = step(env_state)
        states.append(env_state.pipeline_state)
        total += float(env_state.reward)
        if float(env_state.done) > 0:
            break
    return states, total


def replay_html(
    task, params, task_state, episode_length: int, seed: int = 0
) -> tuple[str, float, int]:
    """The replay page of the policy ``params`` as a string (for ``IPython.display.HTML``), the
    return and the length.

    The page is self-contained: Brax's viewer and the scripts it needs (three.js, lil-gui, pako)
    are embedded in it, so it shows without network access.

    Example (skipped in doctests: it needs a trained run and compiles a Brax step, ~10 s):
      >>> import jaxes
      >>> from jaxes.app.train import load_run
      >>> config, _, task, _, state = load_run("runs/pendulum")  # doctest: +SKIP
      >>> params = jaxes.centre(state.strategy_state)  # doctest: +SKIP
      >>> page, ret, length = replay_html(task, params, state.task_state, 100)  # doctest: +SKIP
      >>> page.startswith("<html>")  # doctest: +SKIP
      True
    """
    states, total = rollout_states(task, params, task_state, episode_length, jax.random.key(seed))
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        html = require("brax.io.html", "brax", "Brax replays")

        page = html.render(task.env.sys.tree_replace({"opt.timestep": task.env.dt}), states)
    from jaxes.tasks.brax.offline_page import self_contained

    return self_contained(page), total, len(states) - 1


def write_replay(
    task, params, task_state, episode_length: int, path: str, seed: int = 0
) -> tuple[float, int]:
    """Writes the replay of the policy ``params`` to ``path``; returns the episode's return and
    its length.

    Example (skipped in doctests: it needs a trained run and compiles a Brax step, ~10 s):
      >>> import jaxes
      >>> from jaxes.app.train import load_run
      >>> config, _, task, _, state = load_run("runs/pendulum")  # doctest: +SKIP
      >>> params = jaxes.centre(state.strategy_state)  # doctest: +SKIP
      >>> ret, length = write_replay(
      ...     task, params, state.task_state, 100, "replay.html"
      ... )  # doctest: +SKIP
      >>> length <= 100  # doctest: +SKIP
      True
    """
    page, total, length = replay_html(task, params, task_state, episode_length, seed)
    with open(path, "w") as f:
        f.write(page)
    return total, length
