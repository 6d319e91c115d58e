"""Optimizers the strategies need that optax does not ship."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxes import trees
from jaxes.checks import check_below, check_positive
from jaxes.factored import lowrank as low_rank


class TakesFactors(optax.GradientTransformation):
    """An optax ``GradientTransformation`` that can also write its step in place from a
    gradient with ``jaxes.factored.lowrank.LowRank`` leaves (the population's sum kept as
    factors, from low-rank noise):
    ``apply(grads, state, params, applied) -> (params, state, step_norm)``, the new params and
    optimizer state where ``applied``, the old ones elsewhere. A strategy hands such an
    optimizer its gradient unmultiplied; any other optimizer gets it dense.
    As an optax transformation (``init``, ``update``, ``optax.chain``) it is the plain one."""

    def __new__(cls, init, update, apply=None):
        self = super().__new__(cls, init, update)
        self.apply = apply  # not a field: unpacked, it is optax's (init, update) pair
        return self


def takes_factors(optimizer) -> bool:
    """Whether ``optimizer`` can write its step from factors (a ``TakesFactors``).

    Example:
      >>> takes_factors(clipup(0.1)), takes_factors(optax.sgd(0.1))
      (True, False)
    """
    return isinstance(optimizer, TakesFactors) and optimizer.apply is not None


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

    def clipped(speed):
        return jnp.where(speed > max_speed, max_speed / jnp.where(speed > 0, speed, 1.0), 1.0)

    def normalised(grads):
        norm = trees.tree_norm(grads)
        return jnp.where(norm > 0, step_size / jnp.where(norm > 0, norm, 1.0), 0.0)

    def update(grads, state, params=None):
        del params
        grads = low_rank.dense(grads)  # the plain transformation takes factors multiplied out
        scale = normalised(grads)
        velocity = jax.tree.map(
            lambda v, g: momentum * v - scale * g.astype(v.dtype), state.velocity, grads
        )
        clip = clipped(trees.tree_norm(velocity))
        velocity = jax.tree.map(lambda v: v * clip, velocity)
        return velocity, ClipUpState(velocity)

    def apply(grads, state, params, applied):
        return _apply_in_turn(grads, state, params, applied, momentum, normalised, clipped)

    return TakesFactors(init, update, apply)


def _apply_in_turn(grads, state, params, applied, momentum, normalised, clipped):
    """ClipUp's step written in place from a gradient with ``LowRank`` leaves, with no
    parameter-sized temporary beyond one matrix's product.

    The speed that decides the clip comes before anything is written: for a factored leaf
    ``‖μv − sg‖² = μ²‖v‖² − 2μs⟨v, g⟩ + s²‖g‖²``, from ``v``'s norm, ``V B`` and Gram matrices.
    Then each leaf's velocity and params are written once, in turn: a factored leaf's dense
    product is formed only ``after`` the previous leaf's params are written, so one product is
    alive at a time; θ' reads the written velocity (read from the old one and the product,
    XLA would copy every old velocity first). The step's norm is ``clip · speed``.
    """
    scale = normalised(grads)
    treedef = jax.tree.structure(params)
    v_leaves = treedef.flatten_up_to(state.velocity)
    g_leaves = treedef.flatten_up_to(grads)
    squares = []
    for v, g in zip(v_leaves, g_leaves, strict=True):
        if low_rank.is_factored(g):
            cross = momentum * scale * low_rank.inner(v, g)
            square = momentum**2 * low_rank.square_norm(v) - 2 * cross
            squares.append(square + jnp.square(scale) * low_rank.square_norm(g))
        else:
            squares.append(low_rank.square_norm(momentum * v - scale * g.astype(v.dtype)))
    speed = jnp.sqrt(jnp.maximum(sum(squares), 0.0))
    clip = clipped(speed)
    new_v, new_p, done = [], [], None
    for v, g, p in zip(v_leaves, g_leaves, jax.tree.leaves(params), strict=True):
        factored = low_rank.is_factored(g)
        if factored:
            g = (g if done is None else low_rank.after(g, done)).dense()
        velocity = jnp.where(applied, (momentum * v - scale * g.astype(v.dtype)) * clip, v)
        new_v.append(velocity)
        new_p.append(jnp.where(applied, (p + velocity).astype(p.dtype), p))
        done = new_p[-1] if factored else done
    step_norm = jnp.where(applied, clip * speed, 0.0)
    velocity = treedef.unflatten(new_v)
    return treedef.unflatten(new_p), ClipUpState(velocity), step_norm
