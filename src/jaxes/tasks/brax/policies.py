"""Deterministic flax policies whose actions lie in the environment's action range."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS: dict[str, Callable] = {"tanh": nn.tanh, "relu": nn.relu, "elu": nn.elu}


class Policy(NamedTuple):
    """``init(key) -> params`` and ``apply(params, obs) -> action`` for one observation.

    ``prepare(params, reference) -> params`` (``None`` for most policies) is run once per
    member per generation, before its episodes, on a reference batch of (normalised)
    observations; what it returns is what ``apply`` then gets at every step (virtual batch
    normalisation: the member's own statistics of the reference batch).
    """

    init: Callable[[jax.Array], dict]
    apply: Callable[[dict, jax.Array], jax.Array]
    prepare: Callable[[dict, jax.Array], dict] | None = None


class _MLP(nn.Module):
    hidden_sizes: Sequence[int]
    action_size: int
    activation: Callable

    @nn.compact
    def __call__(self, obs):
        x = obs
        for size in self.hidden_sizes:
            x = self.activation(nn.Dense(size)(x))
        # Zero-initialised output: the first population is centred on "do nothing".
        return nn.tanh(nn.Dense(self.action_size, kernel_init=nn.initializers.zeros)(x))


def mlp(
    obs_size: int,
    action_size: int,
    hidden_sizes: Sequence[int] = (32, 32),
    activation: str = "tanh",
    action_low=-1.0,
    action_high=1.0,
) -> Policy:
    """An MLP whose tanh output is scaled from [-1, 1] to ``[action_low, action_high]``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> pol = mlp(4, 1, (8,), action_low=-3.0, action_high=3.0)
      >>> params = pol.init(jax.random.key(0))
      >>> pol.apply(params, jnp.ones(4)).shape
      (1,)
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: unknown {activation!r}; allowed: {sorted(ACTIVATIONS)}")
    if any(int(h) < 1 for h in hidden_sizes):
        raise ValueError(f"hidden_sizes: expected positive ints, got {tuple(hidden_sizes)}")
    module = _MLP(tuple(int(h) for h in hidden_sizes), action_size, ACTIVATIONS[activation])
    return from_module(module, obs_size, action_size, action_low, action_high)


def from_module(
    module: nn.Module, obs_size: int, action_size: int, action_low=-1.0, action_high=1.0
) -> Policy:
    """Any flax module as a policy: its output, in [-1, 1] (end it with a tanh), is scaled to
    ``[action_low, action_high]``. Its params (any pytree) are what ES perturbs.

    Example:
      >>> import jax, jax.numpy as jnp, flax.linen as nn
      >>> class Tiny(nn.Module):
      ...     @nn.compact
      ...     def __call__(self, obs):
      ...         return nn.tanh(nn.Dense(2)(nn.LayerNorm()(obs)))
      >>> pol = from_module(Tiny(), obs_size=4, action_size=2, action_low=0.0, action_high=1.0)
      >>> params = pol.init(jax.random.key(0))
      >>> sorted(params["params"])
      ['Dense_0', 'LayerNorm_0']
      >>> action = pol.apply(params, jnp.ones(4))
      >>> bool(jnp.all((action >= 0.0) & (action <= 1.0)))
      True
    """
    out = jax.eval_shape(module.init_with_output, jax.random.key(0), jnp.zeros(obs_size))[0]
    if out.shape != (action_size,):
        raise ValueError(
            f"policy: the module maps an observation of size {obs_size} to shape {out.shape}; "
            f"the environment needs ({action_size},)"
        )
    scale = _to_action_range(action_size, action_low, action_high)

    def init(key):
        return module.init(key, jnp.zeros(obs_size))

    def apply(params, obs):
        return scale(module.apply(params, obs))

    return Policy(init, apply)


def _to_action_range(action_size: int, action_low, action_high) -> Callable:
    """Maps a module's output in [-1, 1] to ``[action_low, action_high]``."""
    # numpy constants: building a policy compiles nothing.
    low = np.broadcast_to(np.asarray(action_low, np.float32), (action_size,))
    high = np.broadcast_to(np.asarray(action_high, np.float32), (action_size,))
    return lambda unit: low + (unit + 1.0) * 0.5 * (high - low)


def linear(obs_size: int, action_size: int, action_low=-1.0, action_high=1.0) -> Policy:
    """A linear map of the observation, tanh-bounded to the action range (no hidden layer).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> pol = linear(3, 2, action_low=0.0, action_high=2.0)
      >>> params = pol.init(jax.random.key(0))
      >>> jax.tree.map(jnp.shape, params["params"])
      {'Dense_0': {'bias': (2,), 'kernel': (3, 2)}}
      >>> pol.apply(params, jnp.ones(3)).tolist()  # zero-initialised: mid-range
      [1.0, 1.0]
    """
    return mlp(obs_size, action_size, (), "tanh", action_low, action_high)


# Per-layer statistics of the reference batch: a flax collection that ES does not perturb.
VBN_STATS = "vbn_stats"
_VBN_EPS = 1e-5


class _VBNMLP(nn.Module):
    """An MLP whose hidden pre-activations are normalised with statistics of a reference batch
    (Salimans et al. 2016/2017's virtual batch normalisation), then scaled and shifted by
    learnable ``scale``/``offset`` (ES parameters)."""

    hidden_sizes: Sequence[int]
    action_size: int
    activation: Callable

    @nn.compact
    def __call__(self, obs):
        x = obs
        for i, size in enumerate(self.hidden_sizes):
            h = nn.Dense(size, name=f"Dense_{i}")(x)
            mean = self.variable(VBN_STATS, f"mean_{i}", jnp.zeros, (size,))
            var = self.variable(VBN_STATS, f"var_{i}", jnp.ones, (size,))
            if self.is_mutable_collection(VBN_STATS):  # the reference pass: measure
                axes = tuple(range(h.ndim - 1))
                mean.value, var.value = jnp.mean(h, axes), jnp.var(h, axes)
            h = (h - mean.value) * jax.lax.rsqrt(var.value + _VBN_EPS)
            scale = self.param(f"scale_{i}", nn.initializers.ones, (size,))
            offset = self.param(f"offset_{i}", nn.initializers.zeros, (size,))
            x = self.activation(h * scale + offset)
        out = nn.Dense(self.action_size, kernel_init=nn.initializers.zeros, name="Dense_out")
        return nn.tanh(out(x))


def vbn_mlp(
    obs_size: int,
    action_size: int,
    hidden_sizes: Sequence[int] = (32, 32),
    activation: str = "tanh",
    action_low=-1.0,
    action_high=1.0,
) -> Policy:
    """``mlp`` with virtual batch normalisation: ``prepare(params, reference)`` computes each
    hidden layer's mean and variance over a reference batch of observations, from the
    member's own forward pass (layer by layer, each normalised by the statistics before it);
    ``apply`` normalises every step's activations with them. A member's actions therefore
    depend on its own parameters and the fixed reference batch only, never on the other
    members or the batch it runs in.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> pol = vbn_mlp(3, 1, (4,))
      >>> params = pol.init(jax.random.key(0))
      >>> sorted(params["params"])
      ['Dense_0', 'Dense_out', 'offset_0', 'scale_0']
      >>> ready = pol.prepare(params, jax.random.normal(jax.random.key(1), (16, 3)))
      >>> ready[VBN_STATS]["mean_0"].shape, pol.apply(ready, jnp.ones(3)).shape
      ((4,), (1,))
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: unknown {activation!r}; allowed: {sorted(ACTIVATIONS)}")
    if not hidden_sizes or any(int(h) < 1 for h in hidden_sizes):
        raise ValueError(
            f"hidden_sizes: vbn_mlp needs at least one hidden layer of positive width, got "
            f"{tuple(hidden_sizes)}"
        )
    module = _VBNMLP(tuple(int(h) for h in hidden_sizes), action_size, ACTIVATIONS[activation])
    scale = _to_action_range(action_size, action_low, action_high)

    def init(key):
        # Only the "params" collection: the statistics are measured, never searched.
        return {"params": module.init(key, jnp.zeros(obs_size))["params"]}

    def prepare(params, reference):
        _, stats = module.apply(params, reference, mutable=[VBN_STATS])
        return {"params": params["params"], **stats}

    def apply(params, obs):
        return scale(module.apply(params, obs))

    return Policy(init, apply, prepare)


def _linear_any_widths(
    obs_size: int, action_size: int, hidden_sizes: Sequence[int] = (), **action_range
) -> Policy:
    del hidden_sizes  # a linear policy has no hidden layer
    return linear(obs_size, action_size, **action_range)


# The policies a task (and ``jaxes train --policy``) names: name -> factory(obs_size,
# action_size, hidden_sizes, action_low=..., action_high=...).
POLICIES: dict[str, Callable[..., Policy]] = {
    "mlp": mlp,
    "linear": _linear_any_widths,
    "vbn_mlp": vbn_mlp,
}


def build(
    policy: Policy | nn.Module | str,
    obs_size: int,
    action_size: int,
    hidden_sizes: Sequence[int] = (32, 32),
    action_low=-1.0,
    action_high=1.0,
) -> Policy:
    """The ``Policy`` a task runs: a name from ``POLICIES`` (with ``hidden_sizes``), a flax
    module (through ``from_module``) or a ``Policy`` (as it is).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> pol = build("mlp", 3, 1, (4,), action_low=-2.0, action_high=2.0)
      >>> pol.apply(pol.init(jax.random.key(0)), jnp.ones(3)).tolist()  # zero-initialised
      [0.0]
      >>> build(pol, 3, 1) is pol
      True
      >>> build("cnn", 3, 1)
      Traceback (most recent call last):
      ...
      ValueError: policy: expected 'mlp', 'linear', 'vbn_mlp', a flax Module or a Policy, got 'cnn'
    """
    bounds = {"action_low": action_low, "action_high": action_high}
    if isinstance(policy, str) and policy in POLICIES:
        return POLICIES[policy](obs_size, action_size, hidden_sizes, **bounds)
    if isinstance(policy, nn.Module):
        return from_module(policy, obs_size, action_size, **bounds)
    if isinstance(policy, Policy):
        return policy
    names = ", ".join(repr(name) for name in POLICIES)
    raise ValueError(f"policy: expected {names}, a flax Module or a Policy, got {policy!r}")
