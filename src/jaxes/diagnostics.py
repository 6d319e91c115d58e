"""How good is a strategy's step? Its alignment with the autodiff gradient of the
Gaussian-smoothed objective, and its variance, for a fitness ``jax.grad`` can differentiate.

ES ascends ``J(θ) = E_ε[F(θ + σε)]``. Where ``F`` is differentiable, ``∇J(θ) =
E_ε[∇F(θ + σε)]``, which autodiff estimates to any precision by averaging gradients at many
perturbed points (antithetic pairs here). ``gradient_alignment`` compares that with the
direction a strategy's ``estimate`` returns from one population, over several independent
populations: the cosine between them (→ 1 as the population grows, for open_es) and the
spread of the ES direction (its variance, the trace of its covariance over populations).

The autodiff average is itself an estimate: where ``∇F`` is heavy-tailed (a long rollout's
exploding gradients) ``samples`` gradients may not pin ``∇J`` down, and a cosine against it
means little. ``gradient_alignment`` reports the average's relative standard error and warns
when it exceeds ``RELIABLE_ERROR``.

Example:
  >>> import jax, jax.numpy as jnp, jaxes
  >>> f = lambda x: -jnp.sum((x - 1.0) ** 2)
  >>> small = gradient_alignment(jaxes.open_es(8, 0.1), jnp.zeros(10), f, 0.1, jax.random.key(0))
  >>> large = gradient_alignment(jaxes.open_es(512, 0.1), jnp.zeros(10), f, 0.1,
  ...                            jax.random.key(0))
  >>> bool(small.cosine_mean < large.cosine_mean), bool(large.cosine_mean > 0.95)
  (True, True)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

from jaxes.checks import check_int, check_positive
from jaxes.trees import check_params
from jaxes.types import Params, Strategy

# Above this relative standard error the smoothed gradient is too uncertain to compare with.
RELIABLE_ERROR = 0.5


class Alignment(NamedTuple):
    """What ``gradient_alignment`` measured (NumPy scalars and arrays).

    Attributes:
      cosines: ``(draws,)``, the cosine of each population's ES direction with the smoothed
        gradient.
      cosine_mean, cosine_std: their mean and standard deviation.
      direction_variance: the trace of the ES direction's covariance over populations.
      direction_norm: the norm of the mean ES direction.
      gradient_norm: the norm of the smoothed gradient.
      gradient_error: its relative standard error, ‖standard error‖ / ‖mean‖ over the
        antithetic pairs' averages (above ``RELIABLE_ERROR`` the cosines are not to be trusted).
      gradient: the smoothed gradient (a pytree like the params).
    """

    cosines: np.ndarray
    cosine_mean: float
    cosine_std: float
    direction_variance: float
    direction_norm: float
    gradient_norm: float
    gradient_error: float
    gradient: Params


def _flat(tree) -> jax.Array:
    return jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in jax.tree.leaves(tree)])


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


MODES = ("reverse", "forward")


def smoothed_gradient(
    fitness_fn: Callable[[Params], jax.Array],
    params: Params,
    sigma,
    key,
    samples: int = 1024,
    mode: str = "reverse",
) -> Params:
    """``E_ε[∇F(θ + σε)]`` by autodiff, averaged over ``samples`` points in antithetic pairs
    (``samples`` even). Refuses a fitness whose gradient ``jax.grad`` cannot take or that is
    zero or not finite at every sampled point (argmax, comparisons, integer outputs).

    ``mode="forward"`` takes each gradient with ``jax.jacfwd`` (one JVP per parameter):
    cheaper than reverse mode for a small policy over a long rollout, whose reverse pass must
    keep every step's state."""
    gradient, _ = _smoothed_gradient(fitness_fn, params, sigma, key, samples, mode)
    return gradient


def _smoothed_gradient(fitness_fn, params, sigma, key, samples, mode) -> tuple[Params, float]:
    """The smoothed gradient and its relative standard error (over antithetic pairs)."""
    if mode not in MODES:
        raise ValueError(f"mode: unknown {mode!r}; allowed: {list(MODES)}")
    derivative = jax.grad if mode == "reverse" else jax.jacfwd
    samples = check_int("samples", samples, 2)
    if samples % 2:
        raise ValueError(f"samples: expected an even count (antithetic pairs), got {samples}")
    sigma = check_positive("sigma", sigma)
    params = check_params(params)
    flat, unravel = jax.flatten_util.ravel_pytree(params)

    def grad_at(eps):
        return _flat(derivative(lambda x: fitness_fn(unravel(x)))(flat + sigma * eps))

    @jax.jit
    def gradients(key):
        eps = jax.random.normal(key, (samples // 2, flat.shape[0]), jnp.float32)
        return jax.vmap(grad_at)(jnp.concatenate([eps, -eps]))

    try:
        grads = np.asarray(gradients(key))
    except TypeError as err:
        raise ValueError(
            f"fitness_fn: jax.grad cannot differentiate {_name(fitness_fn)} ({err}); the "
            "diagnostics need a differentiable fitness"
        ) from None
    finite = np.isfinite(grads).all(axis=1)
    if not np.any(finite & np.any(grads != 0, axis=1)):
        raise ValueError(
            f"fitness_fn: the gradient of {_name(fitness_fn)} is zero or not finite at every "
            "sampled point, so it is not differentiable in a way jax.grad sees (argmax, "
            "comparisons, rounding); the diagnostics need a differentiable fitness"
        )
    pairs = (grads[: samples // 2].astype(np.float64) + grads[samples // 2 :]) / 2
    mean = pairs.mean(axis=0)
    stderr = np.sqrt(pairs.var(axis=0, ddof=1).sum() / pairs.shape[0])
    norm = np.linalg.norm(mean)
    error = float(stderr / norm) if norm > 0 else float("inf")
    return unravel(jnp.asarray(mean, flat.dtype)), error


def gradient_alignment(
    strategy: Strategy,
    params: Params,
    fitness_fn: Callable[[Params], jax.Array],
    sigma,
    key,
    *,
    draws: int = 32,
    samples: int = 1024,
    mode: str = "reverse",
) -> Alignment:
    """The cosine between ``strategy``'s ascent direction (``estimate`` on one population at
    ``params``) and the smoothed gradient at scale ``sigma`` (the σ the strategy samples
    with), over ``draws`` independent populations; and the direction's variance.

    Args:
      strategy: any jaxes strategy (its ``estimate`` is what is compared).
      params: θ.
      fitness_fn: one member's params -> a scalar fitness, maximised, differentiable.
      sigma: the smoothing scale (> 0).
      key: PRNG key.
      draws: independent populations (>= 2).
      samples: autodiff gradients averaged for the smoothed gradient (even).
      mode: ``"reverse"`` (``jax.grad``) or ``"forward"`` (``jax.jacfwd``) autodiff.
    """
    draws = check_int("draws", draws, 2)
    grad_key, es_key = jax.random.split(key)
    gradient, error = _smoothed_gradient(fitness_fn, params, sigma, grad_key, samples, mode)
    if not error <= RELIABLE_ERROR:
        warnings.warn(
            f"gradient_alignment: the autodiff average of {_name(fitness_fn)}'s gradient has a "
            f"relative standard error of {error:.2f} (> {RELIABLE_ERROR}), so it does not pin "
            "down the smoothed gradient and the cosines against it are unreliable; raise "
            "samples, or shorten what makes the gradients heavy-tailed",
            stacklevel=2,
        )
    state = strategy.init(jax.random.key(0), params)

    @jax.jit
    def directions(keys):
        def one(k):
            population, s = strategy.ask(k, state)
            direction, _ = strategy.estimate(s, jax.vmap(fitness_fn)(population))
            return _flat(direction)

        return jax.vmap(one)(keys)

    d = np.asarray(directions(jax.random.split(es_key, draws)), np.float64)
    g = np.asarray(_flat(gradient), np.float64)
    norms = np.linalg.norm(d, axis=1) * np.linalg.norm(g)
    cosines = np.where(norms > 0, d @ g / np.where(norms > 0, norms, 1.0), 0.0)
    return Alignment(
        cosines=cosines,
        cosine_mean=float(cosines.mean()),
        cosine_std=float(cosines.std(ddof=1)),
        direction_variance=float(d.var(axis=0, ddof=1).sum()),
        direction_norm=float(np.linalg.norm(d.mean(axis=0))),
        gradient_norm=float(np.linalg.norm(g)),
        gradient_error=error,
        gradient=gradient,
    )
