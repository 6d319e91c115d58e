"""jaxes.tasks.bbob against COCO's own C code (``cocoex`` 2.8.2), point by point.

Tolerance (float64): at every point ``|f_jax - f_coco| <= 1e-9 * max(1, |f_coco - f_opt|)``,
i.e. 1e-9 relative on the regret ``f - f_opt`` where it exceeds 1 and 1e-9 absolute below
(which also bounds the error on ``f`` itself, since ``|f| <= |f - f_opt| + |f_opt|``); the
task's fitness must equal ``-(f_coco - f_opt)`` to the same bound. The implementation is
about 10⁻¹¹ from COCO at worst (f19, which takes cos of numbers near 10⁶), so the bound has
two orders of magnitude of room and would still catch a wrong constant, seed or branch.

Points per (function, dimension, instance): uniform in [-5, 5]^d, near x_opt, x_opt itself,
and beyond the box (every function with a boundary penalty f_pen has it exercised). One jit
per (function, dimension), the instance data passed as arguments.
"""

from __future__ import annotations

import cocoex  # in the test extras: the reference every function is checked against
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxes.tasks import bbob
from jaxes.tasks.bbob import FUNCTIONS, instance_data, problem, task

DIMENSIONS = (2, 5, 10, 20)
INSTANCES = (1, 2, 7, 15, 71)
TOLERANCE = 1e-9
# float32: the same formulas rounded to float32. f16, f19 and f23 take cos of values near 10⁶
# or 2^32 z, beyond float32's 24-bit mantissa, so they only agree to 1e-2 of the regret.
TOLERANCE_32 = {16: 1e-2, 19: 1e-2, 23: 1e-2}
JITTED = {f: jax.jit(fn) for f, fn in FUNCTIONS.items()}
X_OPT_ROW = 28  # in ``points``: 24 uniform, 4 near x_opt, then x_opt


@pytest.fixture(scope="module")
def suite():
    return cocoex.Suite(
        "bbob",
        "instances: " + ",".join(map(str, INSTANCES)),
        "dimensions: " + ",".join(map(str, DIMENSIONS)),
    )


def coco_values(suite, function, dimension, instance, points):
    problem_ = suite.get_problem_by_function_dimension_instance(function, dimension, instance)
    try:
        return np.array([problem_(x) for x in points])
    finally:
        problem_.free()


def points(rng, x_opt):
    d = x_opt.size
    outside = rng.choice([-1.0, 1.0], (4, d)) * rng.uniform(5.5, 12.0, (4, d))
    mixed = np.where(rng.random((4, d)) < 0.5, outside, rng.uniform(-5, 5, (4, d)))
    return np.concatenate(
        [
            rng.uniform(-5.0, 5.0, (24, d)),
            x_opt + 1e-3 * rng.standard_normal((2, d)),
            x_opt + 1e-7 * rng.standard_normal((2, d)),
            x_opt[None],
            mixed,
        ]
    )


def regret_error(values, reference, f_opt):
    return np.abs(values - reference) / np.maximum(1.0, np.abs(reference - f_opt))


@pytest.mark.parametrize("function", range(1, 25))
def test_agrees_with_cocoex(suite, function):
    rng = np.random.default_rng(function)
    worst = 0.0
    with jax.enable_x64(True):
        for d in DIMENSIONS:
            for i in INSTANCES:
                data = instance_data(function, d, i)
                x = points(rng, data["xopt"])
                reference = coco_values(suite, function, d, i, x)
                arrays = {k: jnp.asarray(v) for k, v in data.items()}
                values = np.asarray(JITTED[function](jnp.asarray(x), arrays))
                f_opt = float(data["fopt"])
                error = regret_error(values, reference, f_opt)
                assert values.dtype == np.float64
                assert error.max() <= TOLERANCE, (function, d, i, error.argmax(), error.max())
                assert abs(values[X_OPT_ROW] - f_opt) <= TOLERANCE, (function, d, i)
                worst = max(worst, error.max())
    print(f"f{function}: worst error {worst:.2e}")


@pytest.mark.parametrize("dimension", (2, 3, 10, 40))
def test_optimum_matches_cocoex(dimension):
    # COCO's own record of the optimum; its f20 best_parameter comes from the Schwefel
    # optimum 420.96874633 and sits 2e-10 from the x_opt that f20's transformations use.
    for function in range(1, 25):
        for i in (1, 3, 71):
            data = instance_data(function, dimension, i)
            bare = cocoex.BareProblem("bbob", function, dimension, i)
            assert float(data["fopt"]) == bare.best_value(), (function, i)
            assert np.abs(data["xopt"] - bare.best_parameter()).max() <= 1e-9, (function, i)
            assert abs(bare(data["xopt"]) - bare.best_value()) <= TOLERANCE, (function, i)


def test_vectorised_equals_per_point():
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for function in range(1, 25):
            data = {k: jnp.asarray(v) for k, v in instance_data(function, 5, 2).items()}
            x = rng.uniform(-6.0, 6.0, (2, 3, 5))
            batched = np.asarray(JITTED[function](jnp.asarray(x), data))
            single = np.array([[JITTED[function](jnp.asarray(p), data) for p in row] for row in x])
            assert batched.shape == (2, 3)
            # Only the matmul kernel's summation order may differ (f19's cos magnifies it).
            error = regret_error(batched, single, float(data["fopt"]))
            assert error.max() <= 1e-10, (function, error.max())


def test_float32(suite):
    rng = np.random.default_rng(1)
    d, i = 10, 1
    for function in range(1, 25):
        data = instance_data(function, d, i)
        x = np.concatenate(
            [rng.uniform(-5.0, 5.0, (16, d)), data["xopt"] + 1e-2 * rng.standard_normal((2, d))]
        )
        reference = coco_values(suite, function, d, i, x)
        values = JITTED[function](jnp.asarray(x, jnp.float32), data)
        assert values.dtype == jnp.float32 and values.shape == (18,)
        error = regret_error(np.asarray(values, np.float64), reference, float(data["fopt"]))
        assert error.max() <= TOLERANCE_32.get(function, 1e-4), (function, error.max())


def test_task_fitness_is_minus_the_regret(suite):
    rng = np.random.default_rng(2)
    with jax.enable_x64(True):
        for function in range(1, 25):
            p = problem(function, 5, 2)
            x = points(rng, p.x_opt)
            regret = coco_values(suite, function, 5, 2, x) - p.f_opt
            fitness, stats, info = task(function, 5, 2).evaluate(None, jnp.asarray(x), None)
            assert stats is None and info == {}
            error = np.abs(np.asarray(fitness) + regret) / np.maximum(1.0, np.abs(regret))
            assert error.max() <= TOLERANCE, (function, error.max())


def test_task():
    t = task(8, 4, instance=3)
    p = problem(8, 4, 3)
    assert t.init(jax.random.key(0)) is None
    start = t.init_params(jax.random.key(0))
    assert start.dtype == jnp.float32 and np.all(np.asarray(start) == 0.0)
    x0 = np.full(4, 0.5, np.float32)
    assert np.all(np.asarray(task(8, 4, 3, x0=x0).init_params(None)) == 0.5)
    members = jnp.stack([jnp.zeros(4), jnp.asarray(p.x_opt, jnp.float32), jnp.ones(4)])
    fitness, stats, info = jax.jit(t.evaluate)(jax.random.key(1), members, None)
    assert fitness.shape == (3,) and stats is None and info == {}
    expected = -(np.asarray(p.fn(members)) - p.f_opt)
    np.testing.assert_allclose(fitness, expected, rtol=1e-5, atol=1e-3)
    assert float(fitness[1]) >= -1e-8  # float32 reaches COCO's target at the optimum
    policy = t.evaluate_policy(None, members[2], None)
    assert policy.shape == (1,) and float(policy[0]) == float(fitness[2])


def test_names():
    assert len(bbob.NAMES) == 24 and len(set(bbob.NAMES)) == 24
    assert problem(8, 2).name == "f08 Rosenbrock original"
    assert problem(24, 2).name == "f24 Lunacek bi-Rastrigin"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(function=0, dimension=2), "function: .*1..24"),
        (dict(function=25, dimension=2), "function: .*1..24"),
        (dict(function=1.0, dimension=2), "function"),
        (dict(function=1, dimension=1), "dimension: .*>= 2"),
        (dict(function=1, dimension=True), "dimension"),
        (dict(function=1, dimension=2, instance=0), "instance: .*>= 1"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        problem(**kwargs)
    with pytest.raises(ValueError, match=match):
        task(**kwargs)


def test_bad_start():
    with pytest.raises(ValueError, match="x0: expected shape"):
        task(1, 3, x0=np.zeros(4))
