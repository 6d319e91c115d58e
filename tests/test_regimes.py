"""However a strategy is called: small states, float64 precision, safe donation, clear errors."""

import functools
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import noise

FACTORIES = {
    "open_es": lambda: jaxes.open_es(16, 0.1),
    "pgpe": lambda: jaxes.pgpe(16, 0.1),
    "snes": lambda: jaxes.snes(16, 0.1),
    "ars": lambda: jaxes.ars(16, 0.1),
    "sep_cma_es": lambda: jaxes.sep_cma_es(16, 0.1),
}
SMALL = jnp.ones(10)


def planned_bytes(compiled) -> int:
    """What XLA plans to hold for one call: arguments, outputs and temporaries."""
    m = compiled.memory_analysis()
    return m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_undonated_ask_and_tell_of_a_small_state_copy_kilobytes(name):
    # The README style of most research code: separate jits, nothing donated, so XLA copies
    # every state buffer it returns. A fixed 64 MiB table in the state made that 64 MiB.
    es = FACTORIES[name]()
    state = es.init(jax.random.key(0), SMALL)
    key = jax.random.key(1)
    ask = jax.jit(es.ask).lower(key, state).compile()
    _, asked = jax.eval_shape(es.ask, key, state)
    tell = jax.jit(es.tell).lower(asked, jnp.zeros(16)).compile()
    assert planned_bytes(ask) < 64 * 2**10
    assert planned_bytes(tell) < 64 * 2**10


def test_a_vmapped_init_over_64_seeds_plans_kilobytes():
    es = jaxes.open_es(16, 0.1)
    keys = jax.random.split(jax.random.key(0), 64)
    init = jax.jit(jax.vmap(es.init, in_axes=(0, None))).lower(keys, SMALL).compile()
    assert planned_bytes(init) < 2**20


def test_a_big_problem_reads_a_table_that_grows_with_it():
    es = jaxes.open_es(16, 0.1)
    for dim in (3_000, 300_000):
        state = jax.eval_shape(es.init, jax.random.key(0), jnp.ones(dim))
        size = state.noise_state.values.shape[0]
        assert size == noise.table_size(dim, 8)
        assert 2 * dim < size < 5 * dim + 2**17


def readme_loop(params, generations=5):
    """The README's ten lines, verbatim in shape: the state donated to each generation."""
    strategy = jaxes.open_es(population_size=8, sigma=0.05, learning_rate=0.03)
    state = strategy.init(jax.random.key(0), params)

    @functools.partial(jax.jit, donate_argnums=0)
    def generation(state, key):
        population, state = strategy.ask(key, state)
        fitness = jax.vmap(lambda p: -jnp.sum(p["w"] ** 2))(population)
        return strategy.tell(state, fitness)

    for key in jax.random.split(jax.random.key(1), generations):
        state, _ = generation(state, key)
    return state


def test_the_readme_loop_runs_twice_from_the_same_params():
    params = {"w": jnp.ones(100)}
    first = readme_loop(params)
    second = readme_loop(params)  # the donated state never held the caller's array
    np.testing.assert_array_equal(params["w"], np.ones(100))
    np.testing.assert_array_equal(first.params["w"], second.params["w"])


def test_bad_inputs_name_what_is_wrong():
    es = jaxes.open_es(8, 0.1)
    state = es.init(jax.random.key(0), jnp.zeros(3))
    cases = [
        (lambda: es.tell(state, jnp.arange(8)), "fitness: expected a floating dtype"),
        (lambda: jaxes.evaluate(es, state, jnp.sum), "state: no population to evaluate"),
        (lambda: es.init(jax.random.key(0), jnp.array([1.0, jnp.nan])), "non-finite"),
        (lambda: es.init(jax.random.key(0), {"a": jnp.zeros(2), "b": jnp.zeros(0)}), r"\['b'\]"),
        (lambda: es.init(jax.random.split(jax.random.key(0), 4), jnp.zeros(3)), "key: .*batch"),
        (
            lambda: jaxes.snes(8, sigma={"w": jnp.ones(3)}).init(
                jax.random.key(0), {"w": jnp.zeros(4)}
            ),
            r"sigma: leaf \['w'\] has shape \(3,\)",
        ),
        (
            lambda: jaxes.snes(8, sigma={"v": 1.0}).init(jax.random.key(0), {"w": jnp.zeros(4)}),
            "sigma: expected a number or a pytree like the params",
        ),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()


def test_init_inside_jit_checks_closed_over_params_at_trace_time():
    # Params captured by a traced function are concrete: checked eagerly, never a tracer bool.
    es = jaxes.open_es(8, 0.1)
    good, bad = jnp.zeros(3), jnp.array([0.0, jnp.inf, 0.0])
    state = jax.jit(lambda key: es.init(key, good))(jax.random.key(0))
    assert state.params.shape == (3,)
    with pytest.raises(ValueError, match="non-finite"):
        jax.jit(lambda key: es.init(key, bad))(jax.random.key(0))


def test_evaluate_under_jit_without_an_ask_gives_nan_that_tell_ignores():
    es = jaxes.open_es(8, 0.1)
    state = es.init(jax.random.key(0), jnp.zeros(3))
    fitness = jax.jit(lambda s: jaxes.evaluate(es, s, lambda p: -jnp.sum(p**2)))(state)
    assert np.all(np.isnan(fitness))
    after, info = es.tell(state, fitness)
    assert not bool(info.applied) and int(after.generation) == 0


def test_the_cli_and_python_agree_on_the_smallest_population():
    from jaxes.app import config

    with pytest.raises(config.ConfigError, match="population_size: expected an int >= 2"):
        config.TrainConfig.make(env="inverted_pendulum", population_size=1)


X64_SCRIPT = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_enable_x64", sys.argv[1] == "64")
    import jax.numpy as jnp, numpy as np, jaxes

    dtype = jnp.float64 if sys.argv[1] == "64" else jnp.float32
    # An ellipsoid of condition 1e6 with f* = 100 (as COCO's functions have an offset), so
    # float32 fitness ties once f - f* < 1e-5; the distance is measured in float64 NumPy.
    scales = 10.0 ** (6 * np.arange(10) / 9)
    optimum = np.linspace(-1, 1, 10) / 3
    f = lambda x: 100.0 + jnp.sum(scales * (x - optimum) ** 2)
    gap = lambda x: float(np.sum(scales * (np.asarray(x, np.float64) - optimum) ** 2))
    for name in ("sep_cma_es", "snes"):
        es = getattr(jaxes, name)(16, sigma=1.0)
        state = es.init(jax.random.key(0), jnp.zeros(10, dtype))

        def generation(state, key):
            population, state = es.ask(key, state)
            return es.tell(state, -jax.vmap(f)(population))

        run = jax.jit(lambda s, k: jax.lax.scan(generation, s, jax.random.split(k, 600)))
        state, _ = run(state, jax.random.key(1))
        kinds = sorted({str(x.dtype) for x in jax.tree.leaves(state)
                        if jnp.issubdtype(x.dtype, jnp.floating)})
        print(name, gap(state.params), ",".join(kinds))
    w = jaxes.shaping.centered_rank(jnp.asarray(1 + np.arange(8) * 1e-12, dtype))
    print("ranks", len(set(np.asarray(w).tolist())))
    es = jaxes.open_es(8, 0.1)
    state = es.init(jax.random.key(0), jnp.zeros(3, dtype))
    _, state = es.ask(jax.random.key(1), state)
    state, _ = es.tell(state, jnp.arange(8, dtype=jnp.float16))
    print("half", state.params.dtype, state.fitness.dtype)
    """
)


@functools.cache
def run_precision(bits: str) -> dict[str, list[str]]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", X64_SCRIPT, bits], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()}


@pytest.mark.parametrize("name", ["sep_cma_es", "snes"])
def test_float64_runs_reach_float64_precision(name):
    gap, kinds = run_precision("64")[name]
    assert float(gap) <= 1e-10 and kinds == "float64"  # every float leaf of the state
    # The control: the same run in float32 stalls far above, where its fitness values tie.
    gap32, kinds32 = run_precision("32")[name]
    assert float(gap32) > 1e-8 and kinds32 == "float32"


def test_float64_fitness_is_ranked_in_float64_and_narrower_fitness_is_promoted():
    result = run_precision("64")
    assert result["ranks"] == ["8"]  # 1 + k·1e-12 are 8 distinct numbers in float64
    assert run_precision("32")["ranks"] == ["1"]  # and all equal in float32
    assert result["half"] == ["float64", "float64"]  # float16 fitness, float64 state
