"""Policies for gymnax: dense and convolutional networks, with or without virtual batch
normalisation, whose output is turned into an environment action.

The networks end in a zero-initialised dense layer (the first population is centred on one
action). For a ``Discrete`` action space the output is one logit per action and the action is
its argmax (a deterministic policy, as in Salimans et al. 2017); for a ``Box`` it ends in a
tanh and is scaled to the box.

The convolutional policy is MinAtar's network (Young & Tian 2019), the small counterpart of
the DQN network the paper ran on Atari: one 3×3 convolution with 16 channels (stride 1, same
padding: on a 10×10 grid every cell keeps its neighbourhood) and ReLU, then dense layers
(``hidden_sizes``, default one of 128). ``"vbn_conv"`` normalises the convolution's and each
dense layer's pre-activations with the statistics of a reference batch, through the same
``prepare(params, reference)`` step and ``VBN_STATS`` collection as
``jaxes.tasks.brax.policies.vbn_mlp``: the task collects the reference batch once and each
member measures its own statistics on it before its episodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes.tasks.brax.policies import ACTIVATIONS, VBN_STATS, Policy
from jaxes.tasks.gymnax.envs import Actions

_VBN_EPS = 1e-5
CONV_CHANNELS = 16
# Hidden widths when the caller gives none: the Brax MLP's and MinAtar's network's.
DEFAULT_HIDDEN = {"conv": (128,), "vbn_conv": (128,)}
DENSE_HIDDEN = (32, 32)


def _normalised(module: nn.Module, h: jax.Array, name: str) -> jax.Array:
    """``h`` normalised per feature (last axis) with reference-batch statistics, then scaled
    and shifted by learnable ``scale``/``offset``: ``vbn_mlp``'s layer, any rank."""
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
    """

    hidden_sizes: Sequence[int]
    out_size: int
    activation: Callable
    obs_ndim: int
    conv_channels: int = 0
    squash: bool = False
    vbn: bool = False

    @nn.compact
    def __call__(self, obs):
        batch = obs.shape[: obs.ndim - self.obs_ndim]
        x = obs
        if self.conv_channels:
            h = nn.Conv(self.conv_channels, (3, 3), padding="SAME", name="Conv_0")(x)
            x = self.activation(_normalised(self, h, "conv") if self.vbn else h)
            x = x.reshape(batch + (-1,))
        else:
            x = x.reshape(batch + (-1,))
        for i, size in enumerate(self.hidden_sizes):
            h = nn.Dense(size, name=f"Dense_{i}")(x)
            x = self.activation(_normalised(self, h, str(i)) if self.vbn else h)
        out = nn.Dense(self.out_size, kernel_init=nn.initializers.zeros, name="Dense_out")(x)
        return nn.tanh(out) if self.squash else out


def to_action(actions: Actions) -> Callable[[jax.Array], jax.Array]:
    """Maps a network's output to an environment action: argmax (int32) or box scaling.

    Example:
      >>> import numpy as np, jax.numpy as jnp
      >>> to_action(Actions(True, 3))(jnp.array([0.1, 2.0, -1.0])).tolist()
      1
      >>> box = Actions(False, 1, np.float32([-2.0]), np.float32([2.0]))
      >>> to_action(box)(jnp.array([0.5])).tolist()
      [1.0]
    """
    if actions.discrete:
        return lambda out: jnp.argmax(out, axis=-1).astype(jnp.int32)
    low, high = actions.low, actions.high
    return lambda unit: low + (unit + 1.0) * 0.5 * (high - low)


def network(
    name: str,
    obs_shape: tuple[int, ...],
    actions: Actions,
    hidden_sizes: Sequence[int] | None = None,
) -> Network:
    """The ``Network`` a policy name stands for.

    Example:
      >>> from jaxes.tasks.gymnax.envs import Actions
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
        raise ValueError("hidden_sizes: vbn_mlp needs at least one hidden layer")
    return Network(
        hidden_sizes=hidden_sizes,
        out_size=actions.size,
        activation=ACTIVATIONS["relu" if conv else "tanh"],
        obs_ndim=len(obs_shape),
        conv_channels=CONV_CHANNELS if conv else 0,
        squash=not actions.discrete,
        vbn=vbn,
    )


def from_module(module: nn.Module, obs_shape: tuple[int, ...], actions: Actions) -> Policy:
    """A flax module as a policy: its output (logits for ``Discrete`` actions; in [-1, 1] for a
    ``Box``) becomes the action; a module with a ``VBN_STATS`` collection gets a ``prepare``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> pol = from_module(network("vbn_conv", (10, 10, 4), Actions(True, 3), (8,)),
      ...                   (10, 10, 4), Actions(True, 3))
      >>> ready = pol.prepare(pol.init(jax.random.key(0)), jnp.ones((5, 10, 10, 4)))
      >>> ready[VBN_STATS]["mean_conv"].shape, int(pol.apply(ready, jnp.ones((10, 10, 4))))
      ((16,), 0)
    """
    probe = jnp.zeros(obs_shape)
    out, variables = jax.eval_shape(module.init_with_output, jax.random.key(0), probe)
    if out.shape != (actions.size,):
        raise ValueError(
            f"policy: the module maps an observation of shape {obs_shape} to shape "
            f"{out.shape}; the environment needs ({actions.size},)"
        )
    action = to_action(actions)

    def init(key):
        # Only the "params" collection: the statistics are measured, never searched.
        return {"params": module.init(key, probe)["params"]}

    def apply(params, obs):
        return action(module.apply(params, obs))

    def prepare(params, reference):
        _, stats = module.apply(params, reference, mutable=[VBN_STATS])
        return {"params": params["params"], **stats}

    return Policy(init, apply, prepare if VBN_STATS in variables else None)


# The policies a gymnax task names (dense ones flatten the observation; conv ones need a grid).
POLICIES = ("linear", "mlp", "vbn_mlp", "conv", "vbn_conv")


def build(
    policy: Policy | nn.Module | str,
    obs_shape: tuple[int, ...],
    actions: Actions,
    hidden_sizes: Sequence[int] | None = None,
) -> Policy:
    """The ``Policy`` a gymnax task runs: a name from ``POLICIES``, a flax module (through
    ``from_module``) or a ``Policy`` (used as it is: its ``apply`` returns env actions).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> pol = build("mlp", (4,), Actions(True, 2), (8,))
      >>> int(pol.apply(pol.init(jax.random.key(0)), jnp.ones(4)))  # zero logits: action 0
      0
    """
    if isinstance(policy, str):
        return from_module(network(policy, obs_shape, actions, hidden_sizes), obs_shape, actions)
    if isinstance(policy, nn.Module):
        return from_module(policy, obs_shape, actions)
    if isinstance(policy, Policy):
        return policy
    names = ", ".join(repr(n) for n in POLICIES)
    raise ValueError(f"policy: expected {names}, a flax Module or a Policy, got {policy!r}")
