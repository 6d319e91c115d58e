"""The Brax task against a plain Python loop over env.step."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes.tasks import brax as brax_tasks
from jaxes.tasks.control import running_stats

EPISODE = 60
P, E = 4, 2


def policy_population(task, seed=0, scale=0.3):
    """P random policies: some fall fast, some live longer."""
    keys = jax.random.split(jax.random.key(seed), P)
    params = jax.vmap(task.init_params)(keys)
    noise = jax.tree.map(
        lambda x: scale * jax.random.normal(jax.random.key(seed + 1), x.shape), params
    )
    return jax.tree.map(jnp.add, params, noise)


@functools.cache
def jitted_env(env):
    """``env.reset`` and ``env.step``, jitted once per env. The step's outputs take the dtypes
    of its input state (Brax returns weakly typed rewards), so the state ``reset`` gives and
    the state a step gives share one compiled step."""

    def step(state, action):
        return jax.tree.map(lambda x, t: jnp.asarray(x, t.dtype), env.step(state, action), state)

    return jax.jit(env.reset), jax.jit(step)


def python_loop(task, env, member_params, reset_key, stats, episode_length=EPISODE):
    """Reference: step until done or episode_length steps; reward counts up to and including
    done."""
    reset, step = jitted_env(env)
    state = reset(reset_key)
    total, seen = 0.0, []
    for _ in range(episode_length):
        seen.append(np.asarray(state.obs))
        obs = running_stats.normalize(stats, state.obs)
        state = step(state, task.policy.apply(member_params, obs))
        total += float(state.reward)
        if float(state.done) > 0:
            break
    return total, seen


@pytest.fixture(scope="module", params=["spring", "mjx"])
def setup(request):
    task = brax_tasks.brax_task(
        "inverted_pendulum", request.param, EPISODE, "linear", episodes_per_member=E, chunk_length=7
    )
    return task, jax.jit(task.evaluate)


def test_returns_and_observation_statistics_match_a_python_loop(setup):
    task, evaluate = setup
    population = policy_population(task)
    state = task.init(jax.random.key(0))
    # Non-trivial normalisation first, so the loop must apply the same statistics.
    stats = running_stats.merge(
        state.obs_stats,
        running_stats.batch_moments(
            state.obs_stats, jnp.array([[0.1, -0.2, 0.3, 0.0], [0.3, 0.2, -0.1, 0.2]]), jnp.ones(2)
        ),
    )
    state = state._replace(obs_stats=stats)
    key = jax.random.key(7)
    fitness, moments, info = evaluate(key, population, state)
    new_state = task.update(state, moments)
    reset_keys = jax.random.split(key, E)
    returns, observations, lengths = np.zeros((P, E)), [], []
    for i in range(P):
        member = jax.tree.map(lambda x, i=i: x[i], population)
        for e in range(E):
            returns[i, e], seen = python_loop(task, task.env, member, reset_keys[e], stats)
            observations += seen
            lengths.append(len(seen))
    np.testing.assert_allclose(fitness, returns.mean(1), rtol=1e-5)
    assert min(lengths) < EPISODE  # some episodes really ended early and were masked
    assert int(info.alive_steps) == sum(lengths) and int(info.episodes) == P * E
    # Whole chunks of 7 steps for the whole batch, until the longest episode ended.
    assert int(info.env_steps) == -(-max(lengths) // 7) * 7 * P * E
    obs = np.stack(observations)
    merged = np.concatenate([np.array([[0.1, -0.2, 0.3, 0.0], [0.3, 0.2, -0.1, 0.2]]), obs])
    np.testing.assert_allclose(new_state.obs_stats.mean, merged.mean(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(
        running_stats.variance(new_state.obs_stats), merged.var(0), rtol=1e-3, atol=1e-7
    )


def test_early_exit_matches_the_full_length_scan_and_saves_steps():
    population = policy_population(BRAX_SPRING, scale=3.0)  # wild policies fall fast
    state = BRAX_SPRING.init(jax.random.key(0))
    key = jax.random.key(3)
    early = jax.jit(BRAX_SPRING.evaluate)(key, population, state)
    full = jax.jit(FULL_SCAN.evaluate)(key, population, state)
    np.testing.assert_array_equal(early[0], full[0])
    early_stats = BRAX_SPRING.update(state, early[1]).obs_stats
    full_stats = FULL_SCAN.update(state, full[1]).obs_stats
    np.testing.assert_allclose(early_stats.mean, full_stats.mean, rtol=1e-6)
    assert int(full[2].env_steps) == P * E * EPISODE
    assert int(early[2].env_steps) < int(full[2].env_steps)
    assert int(early[2].env_steps) >= int(early[2].alive_steps)


BRAX_SPRING = brax_tasks.brax_task(
    "inverted_pendulum", "spring", EPISODE, "linear", episodes_per_member=E, chunk_length=7
)
# One chunk of the whole episode: no early exit is possible.
FULL_SCAN = brax_tasks.brax_task(
    "inverted_pendulum", "spring", EPISODE, "linear", episodes_per_member=E, chunk_length=EPISODE
)


def test_non_finite_physics_ranks_worst_and_the_run_goes_on():
    population = policy_population(BRAX_SPRING)
    population = jax.tree.map(lambda x: x.at[1].set(jnp.nan), population)  # member 1 blows up
    state = BRAX_SPRING.init(jax.random.key(0))
    fitness, moments, _ = jax.jit(BRAX_SPRING.evaluate)(jax.random.key(3), population, state)
    new_state = BRAX_SPRING.update(state, moments)
    assert np.isnan(fitness[1]) and np.all(np.isfinite(np.delete(np.asarray(fitness), 1)))
    assert bool(jnp.all(jnp.isfinite(new_state.obs_stats.mean)))
    es = jaxes.open_es(P, 0.1)
    es_state = es.init(
        jax.random.key(0), jax.tree.map(lambda x: x[0], policy_population(BRAX_SPRING))
    )
    _, es_state = es.ask(jax.random.key(1), es_state)
    es_state, info = es.tell(es_state, fitness)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(es_state.params))
    assert float(jaxes.centered_rank(fitness)[1]) == -0.5


@pytest.mark.parametrize("backend", ["generalized", "positional"])
def test_other_backends_match_a_python_loop(backend):
    # Chunks of 7 steps run 21 > 20 steps: the cap at the episode length must mask the last.
    length = 20
    task = brax_tasks.brax_task(
        "inverted_pendulum", backend, length, "linear", eval_episodes=2, chunk_length=7
    )
    evaluate_policy = jax.jit(task.evaluate_policy)
    state, key = task.init(jax.random.key(2)), jax.random.key(0)
    zero = task.init_params(jax.random.key(1))  # the linear policy starts at zero: action 0
    push = jax.tree.map(lambda x: x + 50.0, zero)  # full push: the pole falls in a few steps
    for params, survives in ((zero, True), (push, False)):
        returns = evaluate_policy(key, params, state)
        loop = [
            python_loop(task, task.env, params, k, state.obs_stats, length)
            for k in jax.random.split(key, 2)
        ]
        # inverted_pendulum pays 1 per step, done step included, so a return is the episode's
        # length: all of it if the pole stays up, else up to the fall (later steps are masked;
        # the env itself goes on paying 1 a step after done).
        assert [total for total, _ in loop] == [float(len(seen)) for _, seen in loop]
        np.testing.assert_array_equal(returns, [total for total, _ in loop])
        assert bool(jnp.all(returns == length)) == survives


def test_policies_act_inside_the_control_range():
    task = brax_tasks.brax_task("inverted_pendulum", "spring", 10, "mlp", hidden_sizes=(8,))
    params = jax.tree.map(lambda x: x + 50.0, task.init_params(jax.random.key(0)))
    action = task.policy.apply(params, jnp.ones(4))
    assert float(action[0]) <= 3.0 and float(action[0]) > 2.9  # saturates at the range's edge


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"env_name": "cartpole"},
            r"env: unknown environment 'cartpole'; valid names: \[.*'hopper'",
        ),
        ({"backend": "physx"}, r"backend: unknown 'physx'; allowed"),
        ({"episode_length": 0}, r"episode_length: expected an int >= 1, got 0"),
        ({"policy": "cnn"}, r"policy: expected 'linear', 'mlp', 'vbn_mlp'"),
    ],
)
def test_bad_task_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        brax_tasks.brax_task(**kwargs)


def held_loop(task, env, member_params, reset_key, stats, repeat, episode_length):
    """Reference for frame skip: each action held for ``repeat`` steps, rewards summed, nothing
    counted after done or after ``episode_length`` env steps."""
    reset, step = jitted_env(env)
    state = reset(reset_key)
    total, steps = 0.0, 0
    while steps < episode_length:
        action = task.policy.apply(member_params, running_stats.normalize(stats, state.obs))
        for _ in range(repeat):
            if steps == episode_length:
                break
            state = step(state, action)
            total, steps = total + float(state.reward), steps + 1
            if float(state.done) > 0:
                return total, steps
    return total, steps


def test_action_repeat_holds_each_action_and_sums_rewards():
    repeat, episode = 3, 20  # 20 is not a multiple of 3: the last decision is cut short
    task = brax_tasks.brax_task(
        "inverted_pendulum", "spring", episode, "linear", chunk_length=7, action_repeat=repeat
    )
    population = policy_population(task, scale=0.5)
    state = task.init(jax.random.key(0))
    key = jax.random.key(5)
    fitness, _, info = jax.jit(task.evaluate)(key, population, state)
    reset_key = jax.random.split(key, 1)[0]
    expected = [
        held_loop(task, task.env, jax.tree.map(lambda x, i=i: x[i], population), reset_key,
                  state.obs_stats, repeat, episode)
        for i in range(P)
    ]  # fmt: skip
    np.testing.assert_allclose(fitness, [r for r, _ in expected], rtol=1e-5)
    assert int(info.alive_steps) == sum(n for _, n in expected)
    # Whole chunks of 7 decisions of 3 env steps each, for the whole batch.
    assert int(info.env_steps) % (7 * repeat * P) == 0
    assert len({n for _, n in expected}) > 1  # some episodes ended early, at done


def test_action_repeat_one_is_the_default_task():
    population = policy_population(BRAX_SPRING)
    one = brax_tasks.brax_task(
        "inverted_pendulum", "spring", EPISODE, "linear", episodes_per_member=E, chunk_length=7,
        action_repeat=1,
    )  # fmt: skip
    state = BRAX_SPRING.init(jax.random.key(0))
    key = jax.random.key(3)
    default = jax.jit(BRAX_SPRING.evaluate).lower(key, population, state).as_text()
    assert jax.jit(one.evaluate).lower(key, population, state).as_text() == default
