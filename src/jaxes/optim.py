"""Optimizers the strategies need that optax does not ship."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxes import trees
from jaxes.checks import check_below, check_positive


class ClipUpState(NamedTuple):
    """The velocity ``v`` (a pytree like the params)."""

    velocity: optax.Updates


def clipup(
    step_size: float, max_speed: float | None = None, momentum: float = 0.9
) -> optax.GradientTransformation:
    """ClipUp (Toklu et al. 2020): momentum on the normalised gradient, speed clipped.

    ``v ← momentum·v − step_size·g/‖g‖``, then ``v ← v·min(1, max_speed/‖v‖)``; the update is
    ``v``. ``g`` is a descent gradient (optax's convention), so ``optax.apply_updates`` moves
    against it. Only the direction of ``g`` matters, which makes ``step_size`` a distance in
    parameter space; the paper suggests ``max_speed = 2·step_size`` (the default).

    Example:
      >>> import jax.numpy as jnp
      >>> opt = clipup(0.1)
      >>> updates, _ = opt.update({"x": jnp.array([3.0, 4.0])}, opt.init({"x": jnp.zeros(2)}))
      >>> [round(float(u), 3) for u in updates["x"]]
      [-0.06, -0.08]
    """
    step_size = check_positive("step_size", step_size)
    max_speed = 2.0 * step_size if max_speed is None else check_positive("max_speed", max_speed)
    momentum = check_positive("momentum", momentum, allow_zero=True)
    check_below("momentum", momentum, 1.0, "[0, 1)")

    def init(params):
        return ClipUpState(
            jax.tree.map(
                lambda x: jnp.zeros(jnp.shape(x), jnp.promote_types(x.dtype, jnp.float32)), params
            )
        )

    def update(grads, state, params=None):
        del params
        norm = trees.tree_norm(grads)
        scale = jnp.where(norm > 0, step_size / jnp.where(norm > 0, norm, 1.0), 0.0)
        velocity = jax.tree.map(
            lambda v, g: momentum * v - scale * g.astype(v.dtype), state.velocity, grads
        )
        speed = trees.tree_norm(velocity)
        clip = jnp.where(speed > max_speed, max_speed / jnp.where(speed > 0, speed, 1.0), 1.0)
        velocity = jax.tree.map(lambda v: v * clip, velocity)
        return velocity, ClipUpState(velocity)

    return optax.GradientTransformation(init, update)
