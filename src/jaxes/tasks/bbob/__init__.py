"""COCO's 24 noiseless ``bbob`` functions in JAX, point for point as ``cocoex`` computes them.

``problem(f, d, i)`` builds instance ``i`` of function ``f`` in dimension ``d`` (COCO's data,
drawn by its legacy generators: ``instances.py``), ``task`` wraps it as a ``jaxes`` ``Task``.
In float64 the values agree with ``cocoex`` 2.8 to about 10⁻¹¹ relative
(``tests/test_bbob.py``); in float32 they are the same formulas rounded to float32.

Example:
  >>> import jax.numpy as jnp
  >>> p = problem(8, 5, instance=1)
  >>> p.name, p.f_opt
  ('f08 Rosenbrock original', 149.15)
  >>> round(float(p.fn(jnp.asarray(p.x_opt, jnp.float32))), 2)
  149.15
  >>> p.fn(jnp.zeros((3, 5))).shape
  (3,)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.tasks.bbob.functions import FUNCTIONS
from jaxes.tasks.bbob.instances import instance_data
from jaxes.types import Task

__all__ = ["NAMES", "FUNCTIONS", "Problem", "problem", "task", "instance_data"]

NAMES: tuple[str, ...] = (
    "Sphere",
    "Ellipsoid separable",
    "Rastrigin separable",
    "Skew Rastrigin-Bueche",
    "Linear slope",
    "Attractive sector",
    "Step-ellipsoid",
    "Rosenbrock original",
    "Rosenbrock rotated",
    "Ellipsoid",
    "Discus",
    "Bent cigar",
    "Sharp ridge",
    "Sum of different powers",
    "Rastrigin",
    "Weierstrass",
    "Schaffer F7, condition 10",
    "Schaffer F7, condition 1000",
    "Griewank-Rosenbrock F8F2",
    "Schwefel x*sin(x)",
    "Gallagher 101 peaks",
    "Gallagher 21 peaks",
    "Katsuura",
    "Lunacek bi-Rastrigin",
)  # cocopp's short names, function 1 first


class Problem(NamedTuple):
    """One bbob problem.

    Attributes:
      function, dimension, instance: which one (COCO's numbers).
      fn: ``fn(x) -> f`` for ``x`` of shape ``(..., dimension)``, pure JAX (jit, vmap and
        grad where the function is differentiable); computes in the dtype of ``x``.
      x_opt: a float64 NumPy optimum (for f20 COCO's own ``best_parameter`` is 2·10⁻¹⁰ away;
        both give ``f_opt``).
      f_opt: the optimal value, a float.
      name: e.g. ``"f08 Rosenbrock original"``.
      data: the instance arrays ``fn`` closes over (float64 NumPy).
    """

    function: int
    dimension: int
    instance: int
    fn: Callable[[jax.Array], jax.Array]
    x_opt: np.ndarray
    f_opt: float
    name: str
    data: dict[str, np.ndarray]


def _check(function, dimension, instance) -> None:
    def is_int(value):
        return isinstance(value, int | np.integer) and not isinstance(value, bool)

    if not is_int(function) or not 1 <= function <= 24:
        raise ValueError(
            f"function: expected an int in 1..24 (the bbob functions), got {function!r}"
        )
    if not is_int(dimension) or dimension < 2:
        raise ValueError(
            f"dimension: expected an int >= 2 (COCO's bbob functions are defined from 2 on), "
            f"got {dimension!r}"
        )
    if not is_int(instance) or instance < 1:
        raise ValueError(f"instance: expected an int >= 1, got {instance!r}")


def problem(function: int, dimension: int, instance: int = 1) -> Problem:
    """Instance ``instance`` of bbob function ``function`` in ``dimension`` variables.

    COCO itself stops at 44 variables (its rotations need d² < 2000 normals); the same
    generators go on above that.

    Example:
      >>> p = problem(1, 2)
      >>> p.x_opt.round(4).tolist(), p.f_opt, p.name
      ([0.2528, -1.1568], 79.48, 'f01 Sphere')
    """
    _check(function, dimension, instance)
    function, dimension, instance = int(function), int(dimension), int(instance)
    data = instance_data(function, dimension, instance)
    raw = FUNCTIONS[function]

    def fn(x):
        return raw(x, data)

    return Problem(
        function=function,
        dimension=dimension,
        instance=instance,
        fn=fn,
        x_opt=data["xopt"].copy(),
        f_opt=float(data["fopt"]),
        name=f"f{function:02d} {NAMES[function - 1]}",
        data=data,
    )


def task(function: int, dimension: int, instance: int = 1, x0=None) -> Task:
    """Minimise a bbob problem; fitness is ``-(f(x) - f_opt)`` (maximised, 0 at the optimum).

    COCO's usual target ``f - f_opt <= 10⁻⁸`` is ``fitness >= -1e-8``. The regret is computed
    with ``f_opt`` left out of the sum rather than subtracted afterwards, so that float32 can
    resolve it near the optimum. ``init_params`` gives ``x0`` (default: zeros, the centre of
    COCO's box [-5, 5]^d; float32 unless ``x0`` is an array of another floating dtype).
    ``evaluate`` returns ``(fitness, None, {})``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> t = task(1, 2)
      >>> params = t.init_params(jax.random.key(0))
      >>> fitness, _, _ = t.evaluate(None, jnp.stack([params, params + 1.0]), t.init(None))
      >>> [round(value, 3) for value in fitness.tolist()]
      [-1.402, -5.21]
    """
    spec = problem(function, dimension, instance)
    if x0 is None:
        start = np.zeros(dimension, np.float32)
    else:
        start = np.asarray(x0)
        if start.shape != (dimension,):
            raise ValueError(f"x0: expected shape ({dimension},), got {start.shape}")
        if not np.issubdtype(start.dtype, np.floating):
            start = start.astype(np.float32)
    raw = FUNCTIONS[spec.function]
    centred = {**spec.data, "fopt": np.float64(0.0)}  # every f_opt enters as a last "+ f_opt"

    def regret(x):
        return raw(x, centred)

    def init(key):
        del key

    def evaluate(key, members, task_state):
        del key, task_state
        return -regret(members), None, {}

    def evaluate_policy(key, params, task_state):
        del key, task_state
        return -regret(params)[None]

    def init_params(key):
        del key
        return jnp.asarray(start)

    return Task(init, evaluate, evaluate_policy, init_params)
