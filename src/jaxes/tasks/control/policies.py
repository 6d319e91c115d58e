"""Deterministic flax policies for control tasks: dense and convolutional networks, with or
without virtual batch normalisation, and a head that turns their output into an action.

A network ends in a zero-initialised dense layer, so the first population is centred on one
action. The head maps its output to the environment's ``Actions``: the argmax of one logit per
action for a ``Discrete`` space (a deterministic policy, as in Salimans et al. 2017), or a
[-1, 1] output (the network ends in a tanh) scaled to a box.

The convolutional network is MinAtar's (Young & Tian 2019), the small counterpart of the DQN
network the paper ran on Atari: one 3×3 convolution with 16 channels (stride 1, same padding)
and ReLU, then dense layers. Virtual batch normalisation (``vbn_*``; Salimans et al.
2016/2017) normalises every hidden pre-activation with statistics of a fixed reference batch
of observations, which ``prepare(params, reference)`` measures from the member's own forward
pass (the ``VBN_STATS`` collection, never searched): a member's actions depend on its own
parameters and the reference batch only, never on the other members.

A ``Policy`` built from a flax module keeps the ``module`` and the ``head``, so a task can run
a member as the centre plus its low-rank displacement inside the layers
(``jaxes.factored.apply``) instead of building the member's weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes.tasks.control.spaces import Actions, Observations, box

ACTIVATIONS: dict[str, Callable] = {"tanh": nn.tanh, "relu": nn.relu, "elu": nn.elu}
# Per-layer statistics of the reference batch: a flax collection that ES does not perturb.
VBN_STATS = "vbn_stats"
_VBN_EPS = 1e-5
CONV_CHANNELS = 16
# The policies a task names (dense ones flatten the observation; conv ones need a grid).
POLICIES = ("linear", "mlp", "vbn_mlp", "conv", "vbn_conv")
# Hidden widths when the caller gives none: MinAtar's network's, else the Brax MLP's.
DEFAULT_HIDDEN = {"conv": (128,), "vbn_conv": (128,)}
DENSE_HIDDEN = (32, 32)


class Policy(NamedTuple):
    """``init(key) -> params`` and ``apply(params, obs) -> action`` for one observation.

    Attributes:
      init: the initial params (ES perturbs all of them).
      apply: one observation (the policy's input shape; leading batch axes are kept) to an
        env action.
      prepare: ``prepare(params, reference) -> params``, run once per member per generation
        before its episodes, on a reference batch of (normalised) observations (``None``:
        no such step). What it returns is what ``apply`` gets at every step.
      module: the flax module ``apply`` runs (``None`` for a policy given as functions).
      head: ``module``'s output to an env action.
    """

    init: Callable[[jax.Array], dict]
    apply: Callable[[dict, jax.Array], jax.Array]
    prepare: Callable[[dict, jax.Array], dict] | None = None
    module: nn.Module | None = None
    head: Callable[[jax.Array], jax.Array] | None = None


def _normalised(module: nn.Module, h: jax.Array, name: str) -> jax.Array:
    """``h`` normalised per feature (last axis) with reference-batch statistics, then scaled
    and shifted by learnable ``scale``/``offset``."""
    size = h.shape[-1]
    mean = module.variable(VBN_STATS, f"mean_{name}", jnp.zeros, (size,))
    var = module.variable(VBN_STATS, f"var_{name}", jnp.ones, (size,))
    if module.is_mutable_collection(VBN_STATS):  # the reference pass: measure
        axes = tuple(range(h.ndim - 1))
        mean.value, var.value = jnp.mean(h, axes), jnp.var(h, axes)
    h = (h - mean.value) * jax.lax.rsqrt(var.value + _VBN_EPS)
    scale = module.param(f"scale_{name}", nn.initializers.ones, (size,))
    offset = module.param(f"offset_{name}", nn.initializers.zeros, (size,))
    return h * scale + offset


class Network(nn.Module):
    """Optional 3×3 convolution, dense hidden layers, a zero-initialised output layer.

    Attributes:
      hidden_sizes: dense hidden widths.
      out_size: the output size.
      activation: the hidden activation.
      obs_ndim: the rank of one observation (leading axes beyond it are a batch).
      conv_channels: channels of the 3×3 convolution (0: none; the observation is flattened).
      squash: end with a tanh (Box actions) rather than logits.
      vbn: virtual batch normalisation of every hidden pre-activation.
      out_name: the output layer's name. Brax's ``mlp`` and ``linear`` name it by position
        (``Dense_2`` after two hidden layers), as they always have, so their checkpoints load.
    """

    hidden_sizes: Sequence[int]
    out_size: int
    activation: Callable
    obs_ndim: int
    conv_channels: int = 0
    squash: bool = False
    vbn: bool = False
    out_name: str = "Dense_out"

    @nn.compact
    def __call__(self, obs):
        batch = obs.shape[: obs.ndim - self.obs_ndim]
        x = obs
        if self.conv_channels:
            h = nn.Conv(self.conv_channels, (3, 3), padding="SAME", name="Conv_0")(x)
            x = self.activation(_normalised(self, h, "conv") if self.vbn else h)
        x = x.reshape(batch + (-1,))
        for i, size in enumerate(self.hidden_sizes):
            h = nn.Dense(size, name=f"Dense_{i}")(x)
            x = self.activation(_normalised(self, h, str(i)) if self.vbn else h)
        out = nn.Dense(self.out_size, kernel_init=nn.initializers.zeros, name=self.out_name)(x)
        return nn.tanh(out) if self.squash else out


def head(actions: Actions) -> Callable[[jax.Array], jax.Array]:
    """A network's output to an env action: argmax (int32), or [-1, 1] scaled to the box.

    Example:
      >>> import numpy as np, jax.numpy as jnp
      >>> head(Actions(True, 3))(jnp.array([0.1, 2.0, -1.0])).tolist()
      1
      >>> head(box(1, -2.0, 2.0))(jnp.array([0.5])).tolist()
      [1.0]
    """
    if actions.discrete:
        return lambda out: jnp.argmax(out, axis=-1).astype(jnp.int32)
    low, high = actions.low, actions.high  # numpy: building a policy compiles nothing
    return lambda unit: low + (unit + 1.0) * 0.5 * (high - low)


def network(
    name: str,
    obs_shape: tuple[int, ...],
    actions: Actions,
    hidden_sizes: Sequence[int] | None = None,
    activation: str | None = None,
    out_name: str = "Dense_out",
) -> Network:
    """The ``Network`` a policy name stands for (``activation``: ReLU for the conv ones,
    else tanh, unless given).

    Example:
      >>> network("conv", (10, 10, 4), Actions(True, 3)).hidden_sizes
      (128,)
    """
    if name not in POLICIES:
        names = ", ".join(repr(n) for n in POLICIES)
        raise ValueError(f"policy: expected {names}, a flax Module or a Policy, got {name!r}")
    conv = name in ("conv", "vbn_conv")
    if conv and len(obs_shape) != 3:
        raise ValueError(
            f"policy: {name!r} needs (height, width, channels) observations, got shape {obs_shape}"
        )
    if hidden_sizes is None:
        hidden_sizes = DEFAULT_HIDDEN.get(name, DENSE_HIDDEN)
    hidden_sizes = () if name == "linear" else tuple(int(h) for h in hidden_sizes)
    if any(h < 1 for h in hidden_sizes):
        raise ValueError(f"hidden_sizes: expected positive ints, got {hidden_sizes}")
    vbn = name.startswith("vbn_")
    if vbn and not conv and not hidden_sizes:
        raise ValueError(
            f"hidden_sizes: vbn_mlp needs at least one hidden layer of positive width, got "
            f"{hidden_sizes}"
        )
    activation = activation or ("relu" if conv else "tanh")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: unknown {activation!r}; allowed: {sorted(ACTIVATIONS)}")
    return Network(
        hidden_sizes=hidden_sizes,
        out_size=actions.size,
        activation=ACTIVATIONS[activation],
        obs_ndim=len(obs_shape),
        conv_channels=CONV_CHANNELS if conv else 0,
        squash=not actions.discrete,
        vbn=vbn,
        out_name=out_name,
    )


def from_module(module: nn.Module, obs_shape: tuple[int, ...], actions: Actions) -> Policy:
    """A flax module as a policy: its output (logits for ``Discrete`` actions; in [-1, 1] for a
    box, so end it with a tanh) becomes the action. ES perturbs its ``"params"`` (other
    collections, such as a LayerNorm's none or a BatchNorm's statistics, pass through). A
    module with a ``VBN_STATS`` collection gets a ``prepare``.

    Example:
      >>> import jax, jax.numpy as jnp, flax.linen as nn
      >>> class Tiny(nn.Module):
      ...     @nn.compact
      ...     def __call__(self, obs):
      ...         return nn.tanh(nn.Dense(2)(nn.LayerNorm()(obs)))
      >>> pol = from_module(Tiny(), (4,), box(2, 0.0, 1.0))
      >>> params = pol.init(jax.random.key(0))
      >>> sorted(params["params"])
      ['Dense_0', 'LayerNorm_0']
      >>> action = pol.apply(params, jnp.ones(4))
      >>> bool(jnp.all((action >= 0.0) & (action <= 1.0)))
      True
    """
    probe = jnp.zeros(obs_shape)
    out, variables = jax.eval_shape(module.init_with_output, jax.random.key(0), probe)
    if out.shape != (actions.size,):
        raise ValueError(
            f"policy: the module maps an observation of shape {obs_shape} to shape "
            f"{out.shape}; the environment needs ({actions.size},)"
        )
    to_action = head(actions)

    def init(key):
        # The statistics are measured, never searched.
        variables = module.init(key, probe)
        return {name: value for name, value in variables.items() if name != VBN_STATS}

    def apply(params, obs):
        return to_action(module.apply(params, obs))

    def prepare(params, reference):
        _, stats = module.apply(params, reference, mutable=[VBN_STATS])
        return {**params, **stats}

    vbn = VBN_STATS in variables
    return Policy(init, apply, prepare if vbn else None, module, to_action)


def build(
    policy: Policy | nn.Module | str,
    observations: Observations,
    actions: Actions,
    hidden_sizes: Sequence[int] | None = None,
    out_name: str = "Dense_out",
) -> Policy:
    """The ``Policy`` a task runs: a name from ``POLICIES``, a flax module (through
    ``from_module``) or a ``Policy`` (used as it is: its ``apply`` returns env actions).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> pol = build("mlp", Observations((4,)), Actions(True, 2), (8,))
      >>> int(pol.apply(pol.init(jax.random.key(0)), jnp.ones(4)))  # zero logits: action 0
      0
      >>> build("cnn", Observations((4,)), Actions(True, 2))  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ...
      ValueError: policy: expected 'linear', 'mlp', ..., a flax Module or a Policy, got 'cnn'
    """
    shape = observations.shape
    if isinstance(policy, str):
        module = network(policy, shape, actions, hidden_sizes, out_name=out_name)
        return from_module(module, shape, actions)
    if isinstance(policy, nn.Module):
        return from_module(policy, shape, actions)
    if isinstance(policy, Policy):
        return policy
    names = ", ".join(repr(n) for n in POLICIES)
    raise ValueError(f"policy: expected {names}, a flax Module or a Policy, got {policy!r}")


def _vector(name, obs_size, action_size, hidden_sizes, activation, action_low, action_high):
    actions = box(action_size, action_low, action_high)
    hidden = () if name == "linear" else tuple(hidden_sizes)
    # Brax's plain networks name their output by position (see Network.out_name).
    out_name = "Dense_out" if name == "vbn_mlp" else f"Dense_{len(hidden)}"
    module = network(name, (obs_size,), actions, hidden, activation, out_name)
    return from_module(module, (obs_size,), actions)


def mlp(
    obs_size: int,
    action_size: int,
    hidden_sizes: Sequence[int] = DENSE_HIDDEN,
    activation: str = "tanh",
    action_low=-1.0,
    action_high=1.0,
) -> Policy:
    """An MLP on a vector observation whose tanh output is scaled to
    ``[action_low, action_high]`` (Brax's ``"mlp"``).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> pol = mlp(4, 1, (8,), action_low=-3.0, action_high=3.0)
      >>> pol.apply(pol.init(jax.random.key(0)), jnp.ones(4)).shape
      (1,)
    """
    return _vector("mlp", obs_size, action_size, hidden_sizes, activation, action_low, action_high)


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
    return _vector("linear", obs_size, action_size, (), "tanh", action_low, action_high)


def vbn_mlp(
    obs_size: int,
    action_size: int,
    hidden_sizes: Sequence[int] = DENSE_HIDDEN,
    activation: str = "tanh",
    action_low=-1.0,
    action_high=1.0,
) -> Policy:
    """``mlp`` with virtual batch normalisation: ``prepare(params, reference)`` computes each
    hidden layer's mean and variance over a reference batch of observations, layer by layer
    (each normalised by the statistics before it); ``apply`` normalises every step's
    activations with them.

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
    return _vector(
        "vbn_mlp", obs_size, action_size, hidden_sizes, activation, action_low, action_high
    )
