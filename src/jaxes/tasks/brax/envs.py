"""Brax environments by name: which backends each one runs on, loading one quietly, and the
two facts a policy needs from it (observation size and action range).

Two of the environments Brax lists need help with the pinned versions:

- ``swimmer`` runs only on the ``generalized`` backend, whose fluid model calls
  ``jnp.clip(x, a_min=...)``, a keyword jax 0.10 removed. ``load_env`` gives Brax's fluid
  module a ``clip`` that accepts it (that module only; ``jax.numpy`` itself is untouched).
- ``fast`` (Brax's test env) has no physical system, so no actuator control range: its
  actions are taken to lie in [-1, 1].
"""

from __future__ import annotations

import contextlib
import io
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jaxes import compat
from jaxes.extras import require

BRAX = "Brax environments"  # what the 'brax' extra is for, in its missing-extra line
BACKENDS = ("generalized", "positional", "spring", "mjx")

# Environments that do not run on every backend (Brax raises "Unsupported backend" for the
# others). Any env not listed runs on all of BACKENDS.
_ONLY_ON = {"swimmer": ("generalized",)}


@contextlib.contextmanager
def _quiet():
    """Python warnings and prints off, and MuJoCo's own warnings too: its C library prints
    them (halfcheetah's model uses a deprecated attribute) and appends them to a
    ``MUJOCO_LOG.TXT`` in the working directory."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        require("brax", "brax", BRAX)  # named first: without the extra, both are missing
        mujoco = require("mujoco", "brax", BRAX)

        previous = mujoco.get_mju_user_warning()
        mujoco.set_mju_user_warning(lambda message: None)
        try:
            yield
        finally:
            mujoco.set_mju_user_warning(previous)


def env_names() -> list[str]:
    """Every environment name Brax knows.

    Example:
      >>> names = env_names()
      >>> names[:3], "inverted_pendulum" in names
      (['ant', 'fast', 'halfcheetah'], True)
    """
    with _quiet():
        envs = require("brax.envs", "brax", BRAX)

        return sorted(envs._envs)


def supported_backends(env_name: str) -> tuple[str, ...]:
    """The backends ``env_name`` runs on.

    Example:
      >>> supported_backends("swimmer"), supported_backends("hopper")[:2]
      (('generalized',), ('generalized', 'positional'))
    """
    return _ONLY_ON.get(env_name, BACKENDS)


def check_env(env_name, backend) -> None:
    """``ValueError`` naming the argument for an unknown env, an unknown backend, or a pair
    that does not run (with the backends that env supports).

    Example:
      >>> check_env("swimmer", "spring")
      Traceback (most recent call last):
        ...
      ValueError: backend: swimmer runs only on ['generalized'], not 'spring'
    """
    names = env_names()
    if env_name not in names:
        raise ValueError(f"env: unknown environment {env_name!r}; valid names: {names}")
    if backend not in BACKENDS:
        raise ValueError(f"backend: unknown {backend!r}; allowed: {list(BACKENDS)}")
    allowed = supported_backends(env_name)
    if backend not in allowed:
        raise ValueError(f"backend: {env_name} runs only on {list(allowed)}, not {backend!r}")


def load_env(env_name: str, backend: str = "spring"):
    """``brax.envs.get_environment`` with its import chatter silenced and inputs checked.

    Example:
      >>> env = load_env("inverted_pendulum")
      >>> type(env).__name__, env.action_size
      ('InvertedPendulum', 1)
      >>> load_env("pendulum")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      ValueError: env: unknown environment 'pendulum'; valid names: ['ant', ...]
    """
    check_env(env_name, backend)
    with _quiet():
        envs = require("brax.envs", "brax", BRAX)

        _fluid_clip_accepts_a_min()
        with _models_on_local_device():
            return envs.get_environment(env_name, backend=backend)


def _fluid_clip_accepts_a_min() -> None:
    """Brax 0.14's ``fluid.force`` calls ``jp.clip(..., a_min=...)``, which jax 0.10's ``clip``
    refuses: its module's ``jp`` becomes ``jax.numpy`` with ``compat.clip``, which takes both."""
    fluid = require("brax.fluid", "brax", BRAX)

    if getattr(fluid.jp, "clip", None) is compat.clip:
        return
    namespace = types.SimpleNamespace(**{k: getattr(jnp, k) for k in dir(jnp) if k[0] != "_"})
    namespace.clip = compat.clip
    fluid.jp = namespace


@contextlib.contextmanager
def _models_on_local_device():
    """MJX puts a model on ``jax.devices()[0]``; with several processes that device belongs to
    process 0, and the other processes could not use their copy. Point it at a local device."""
    if jax.process_count() == 1:
        yield
        return
    global_devices = jax.devices
    jax.devices = lambda *args, **kwargs: jax.local_devices()
    try:
        yield
    finally:
        jax.devices = global_devices


def observation_size(env) -> int:
    """The length of ``env``'s observation vector, from a traced reset.

    Brax's own ``env.observation_size`` runs ``reset`` op by op, which compiles every
    operation on first use (about 3 s on a 2-core CPU); tracing compiles nothing.

    Example:
      >>> observation_size(load_env("inverted_pendulum"))
      4
    """
    state = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
    return state.obs.shape[-1]


def action_range(env) -> dict:
    """``action_low``/``action_high`` from the actuators' control range; [-1, 1] where the
    range is unbounded or the env has no physical system (Brax's ``fast``).

    Example:
      >>> bounds = action_range(load_env("inverted_pendulum"))
      >>> {name: value.tolist() for name, value in bounds.items()}
      {'action_low': [-3.0], 'action_high': [3.0]}
      >>> action_range(load_env("fast"))
      {'action_low': -1.0, 'action_high': 1.0}
    """
    unit = {"action_low": -1.0, "action_high": 1.0}
    system = getattr(env, "sys", None)
    if system is None:
        return unit
    # numpy, not jnp: eager jnp would compile each operation before training starts.
    ctrl = np.asarray(system.actuator.ctrl_range, np.float32)
    bounded = bool(np.all(np.isfinite(ctrl)) and np.all(ctrl[:, 1] > ctrl[:, 0]))
    if not bounded or ctrl.shape[0] != env.action_size:
        return unit
    return {"action_low": ctrl[:, 0], "action_high": ctrl[:, 1]}
