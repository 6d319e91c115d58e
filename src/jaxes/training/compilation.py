"""The XLA options jaxes compiles its training programs with, on the CPU.

The runner compiles its blocks and its evaluation ahead of time (``jax.jit(f).lower(...)``),
and ``compile`` adds these options there: on the CPU backend, XLA's elemental code generator
instead of its newer fusion emitters (``xla_cpu_use_fusion_emitters=False``). Most of a Brax
run's start-up is XLA compiling the physics step inside the rollout loops; with these options
every program measured compiles in 0.42-0.69 of XLA's default time and the fused training
blocks run 8-13 % faster (docs/results/speed.md, "Brax ES: overhead and compile time"; jax
0.10.2).

Floating-point results differ from XLA's defaults in the last bits, so a long Brax episode
can end differently. Every program the runner trains or evaluates with, and ``jaxes eval``,
is compiled with the same options, so resuming, ``--seeds`` and re-evaluation agree with
training. Functions the user calls or jits (``block_runner``'s result called directly,
``init_state``, ``generation_step``) keep XLA's defaults: options on a ``jax.jit`` would make
them fail inside another ``jit``. ``CPU_OPTIONS = {}``, set before a run compiles, gives the
runner XLA's defaults too; other backends always get them.
"""

from __future__ import annotations

import jax

CPU_OPTIONS: dict[str, object] = {"xla_cpu_use_fusion_emitters": False}


def compiler_options() -> dict[str, object] | None:
    """The XLA options for the default backend (``None``: XLA's own).

    Example:
      >>> compiler_options() == (CPU_OPTIONS if jax.default_backend() == "cpu" else None)
      True
    """
    if jax.default_backend() != "cpu" or not CPU_OPTIONS:
        return None
    return dict(CPU_OPTIONS)


def compile(lowered: jax.stages.Lowered) -> jax.stages.Compiled:  # noqa: A001 - the stage's name
    """``lowered.compile()`` with ``compiler_options()``.

    Example:
      >>> import jax.numpy as jnp
      >>> double = compile(jax.jit(lambda x: 2 * x).lower(jnp.arange(3)))
      >>> double(jnp.arange(3)).tolist()
      [0, 2, 4]
    """
    return lowered.compile(compiler_options=compiler_options())
