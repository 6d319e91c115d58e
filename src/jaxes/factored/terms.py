"""The factored term each flax layer adds for a low-rank displacement of its weight: ``nn.Dense``,
``nn.DenseGeneral``, ``nn.Embed`` (lookup and ``attend``) and ``nn.Conv``; and the int8
forward of an ``nn.Dense``. ``jaxes.factored.apply`` intercepts the layers and asks here."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxes.factored import int8 as quantized
from jaxes.factored.int8 import Int8
from jaxes.factored.lowrank import LowRank


def low_rank_term(x: jax.Array, delta: LowRank, precision=None) -> jax.Array:
    """``x @ (A Bᵀ)`` as ``(x A) Bᵀ``: ``x`` is ``(..., m)``, the result ``(..., n)``."""
    xa = jnp.einsum("...m,mr->...r", x, delta.a, precision=precision)
    return jnp.einsum("...r,nr->...n", xa, delta.b, precision=precision)


def _letters(n: int) -> str:
    return "abcdefghijklmnopq"[:n]


def _dense_term(x, d: LowRank, precision):
    return low_rank_term(x, d, precision)


def _dense_general_term(module: nn.DenseGeneral, x, d: LowRank, precision):
    """The low-rank term of an ``nn.DenseGeneral`` whose kernel (inputs' contracted axes, then
    features) is factored over its last two axes, as one einsum; ``None`` where the layer
    contracts other than the inputs' trailing axes or has batch axes."""
    axis = module.axis if isinstance(module.axis, tuple) else (module.axis,)
    axis = tuple(a % x.ndim for a in axis)
    if module.batch_dims or axis != tuple(range(x.ndim - len(axis), x.ndim)):
        return None
    k = _letters(d.a.ndim)  # the kernel's axes: inputs' contracted ones, then features
    inputs, outputs = k[: len(axis)], k[len(axis) :]
    spec = f"...{inputs},{k[:-1]}r,{k[:-2]}{k[-1]}r->...{outputs}"
    return jnp.einsum(spec, x, d.a, d.b, precision=precision)


def _embed_term(x, d: LowRank):
    """Rows ``x`` (token ids) of ``A Bᵀ``: ``A[x] Bᵀ``."""
    return jnp.einsum("...r,nr->...n", jnp.take(d.a, x, axis=0), d.b)


def _attend_term(x, d: LowRank):
    """``x (A Bᵀ)ᵀ = (x B) Aᵀ``: an embedding used as the output layer."""
    return jnp.einsum("...r,mr->...m", jnp.einsum("...n,nr->...r", x, d.b), d.a)


def _per_axis(value, n: int, default: int) -> tuple[int, ...]:
    """A Conv setting (``None``, an int or one per spatial axis) as one int per axis."""
    if value is None:
        return (default,) * n
    if isinstance(value, int):
        return (value,) * n
    return tuple(int(v) for v in value)


def _conv_padding(padding, n: int):
    """``nn.Conv``'s padding as ``lax`` takes it (``None``: a mode the term does not handle,
    such as ``"CIRCULAR"`` or ``"CAUSAL"``)."""
    if isinstance(padding, str):
        return padding if padding in ("SAME", "VALID") else None
    if isinstance(padding, int):
        return ((padding, padding),) * n
    pads = tuple(padding)
    if all(isinstance(p, int) for p in pads):
        return tuple((p, p) for p in pads)
    return tuple(tuple(p) for p in pads)


def conv_unsupported(module: nn.Conv) -> str | None:
    """Why ``module``'s factored term cannot be computed (``None``: it can)."""
    if module.feature_group_count != 1:
        return f"feature_group_count={module.feature_group_count}"
    if module.mask is not None:
        return "a kernel mask"
    if any(g != 1 for g in _per_axis(module.input_dilation, 1, 1)):
        return f"input_dilation={module.input_dilation}"
    if _conv_padding(module.padding, 1) is None:
        return f"padding={module.padding!r}"
    return None


def _conv_term(module: nn.Conv, x, d: LowRank, precision):
    """The low-rank term of an ``nn.Conv`` whose kernel ``(k..., in, out)`` is factored over
    its last two axes, one rank-``r`` product per kernel tap: ``Σ_tap x_tap A_tap B_tapᵀ``.

    Three steps, none of which builds a kernel: every pixel's projection on every tap's
    ``A`` (``in × taps·r``), each tap's projection sliced at the pixels that tap reaches (the
    layer's own padding, strides and kernel dilation), and the contraction with ``B``.
    ``None`` where the layer groups features, masks its kernel, dilates its input, or pads
    other than ``"SAME"``, ``"VALID"`` or explicitly."""
    n = d.a.ndim - 2  # spatial axes of the kernel
    if conv_unsupported(module) is not None:
        return None
    taps_shape, r = d.a.shape[:n], d.a.shape[-1]
    taps = math.prod(taps_shape)
    lead, spatial = x.shape[: x.ndim - n - 1], x.shape[x.ndim - n - 1 : -1]
    batch = x.reshape((-1,) + x.shape[x.ndim - n - 1 :])
    a = jnp.moveaxis(d.a.reshape((taps,) + d.a.shape[n:]), 0, 1)  # (in, taps, r)
    projected = jnp.einsum("...c,ctr->...tr", batch, a, precision=precision)
    strides = _per_axis(module.strides, n, 1)
    dilation = _per_axis(module.kernel_dilation, n, 1)
    window = tuple((k - 1) * g + 1 for k, g in zip(taps_shape, dilation, strict=True))
    padding = _conv_padding(module.padding, n)
    if isinstance(padding, str):
        padding = jax.lax.padtype_to_pads(spatial, window, strides, padding)
    zero = jnp.zeros((), projected.dtype)
    config = [(0, 0, 0)] + [(lo, hi, 0) for lo, hi in padding] + [(0, 0, 0)] * 2
    padded = jax.lax.pad(projected, zero, config)
    out = tuple(
        (size + lo + hi - w) // s + 1
        for size, (lo, hi), w, s in zip(spatial, padding, window, strides, strict=True)
    )
    reached = []
    for t, tap in enumerate(np.ndindex(*taps_shape)):
        starts = [0] + [i * g for i, g in zip(tap, dilation, strict=True)] + [t, 0]
        limits = [padded.shape[0]]
        limits += [b + (o - 1) * s + 1 for b, o, s in zip(starts[1:], out, strides, strict=False)]
        limits += [t + 1, r]
        steps = (1, *strides, 1, 1)
        reached.append(jax.lax.slice(padded, starts, limits, steps)[..., 0, :])
    moved = jnp.stack(reached, axis=-2)  # (N, out..., taps, r)
    b = d.b.reshape((taps,) + d.b.shape[n:])  # (taps, out, r)
    term = jnp.einsum("...tr,tfr->...f", moved, b, precision=precision)
    return term.reshape(lead + term.shape[1:])


# The layers that take a factored displacement of their weight (and an Int8 one), and the name
# of that weight in their params.
WEIGHT = {
    nn.Dense: "kernel",
    nn.DenseGeneral: "kernel",
    nn.Conv: "kernel",
    nn.Embed: "embedding",
}


def weight_name(context) -> str | None:
    """The weight a served layer's intercepted call reads (``None``: not a served call)."""
    for kind, name in WEIGHT.items():
        if isinstance(context.module, kind):
            method = context.method_name
            if method == "__call__" or (kind is nn.Embed and method == "attend"):
                return name
    return None


def term(context, x, d: LowRank):
    """The low-rank term the intercepted call adds (``None``: this call cannot take it)."""
    module = context.module
    if isinstance(module, nn.Dense):
        return _dense_term(x, d, module.precision)
    if isinstance(module, nn.DenseGeneral):
        return _dense_general_term(module, x, d, module.precision)
    if isinstance(module, nn.Conv):
        return _conv_term(module, x, d, module.precision)
    if context.method_name == "attend":
        return _attend_term(x, d)
    return _embed_term(x, d)


def int8_call(context, x, w: Int8):
    """The quantised forward of an ``nn.Dense`` (``None`` for any other layer, which then
    reads its weight dequantized)."""
    module = context.module
    if not isinstance(module, nn.Dense) or w.values.ndim != 2:
        return None
    out = quantized.matmul(x, w)
    if module.use_bias:
        out = out + module.get_variable("params", "bias").astype(jnp.float32)
    dtype = module.dtype or jnp.result_type(x, module.param_dtype)
    return out.astype(jnp.promote_types(dtype, jnp.float32))
