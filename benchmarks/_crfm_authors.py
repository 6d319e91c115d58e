"""evosax 0.3.2's `CR_FM_NES` with the two changes that make it the authors' CR-FM-NES
(`crfmnes` 1.0.0, Nomura & Ono), for benchmarks/cr_fm_nes_reference.py and benchmarks/bbob.py.

evosax departs from the authors in two places (its `cr_fm_nes.py`):
- its rank weights `w = ŵ/Σ max(ŵ, 0) - 1/λ` use the log weights `ŵ` before clipping them at 0,
  and `tell` then clips the shaped fitness at 0 (`jnp.clip(fitness, min=0.0)`), so the
  evolution path p_σ, the mean's step and σ's gradient (outside the "moving" regime) get
  positive weights only, where the authors' `w_rank = ŵ⁺/Σŵ⁺ - 1/λ` sums to 0;
- `μ_eff` (and with it `c_σ`, `c_c`, `c_1`) comes from those unclipped weights.

`authors(lam, d, dtype)` undoes both: the authors' `w_rank` as the fitness shaping, the
authors' `μ_eff` in the params, and, while `unclipped()` is in effect (when evosax traces its
`tell`), the module's `jnp.clip` is the identity.
"""

from __future__ import annotations

import contextlib
import types


def authors_weights(population, fitness, state, params):
    """The authors' `w_rank` by rank (evosax minimises): `ŵ⁺/Σŵ⁺ - 1/λ`."""
    import jax.numpy as jnp

    lam = fitness.shape[-1]
    return _w_rank(lam)[jnp.argsort(jnp.argsort(fitness))]


def _w_rank(lam: int):
    import jax.numpy as jnp

    hat = jnp.maximum(jnp.log(lam / 2 + 1) - jnp.log(jnp.arange(1, lam + 1)), 0.0)
    return hat / hat.sum() - 1 / lam


def authors_params(params, d: int, lam: int):
    """evosax's params with `μ_eff` and what depends on it as the authors compute them."""
    import jax.numpy as jnp

    mueff = 1 / jnp.sum((_w_rank(lam) + 1 / lam) ** 2)
    return params.replace(
        mu_eff=mueff,
        c_std=(mueff + 2.0) / (d + mueff + 5.0),
        c_c=(4.0 + mueff / d) / (d + 4.0 + 2.0 * mueff / d),
        c1=2.0 / ((d + 1.3) ** 2 + mueff) * (d - 5) / 6,
    )


def authors(lam: int, d: int, dtype):
    """`(es, params)`: evosax's `CR_FM_NES` for `(λ, d)` with the authors' weights and `μ_eff`;
    trace its `tell` inside `unclipped()`."""
    import jax.numpy as jnp
    from evosax.algorithms import CR_FM_NES

    es = CR_FM_NES(lam, jnp.zeros(d, dtype), fitness_shaping_fn=authors_weights)
    return es, authors_params(es.default_params, d, lam)


@contextlib.contextmanager
def unclipped():
    """evosax's CR-FM-NES module with `jnp.clip` the identity (its one use is the clip of the
    shaped fitness in `tell`; the params' clip runs when they are made, outside this)."""
    import jax.numpy as jnp
    from evosax.algorithms.distribution_based import cr_fm_nes as module

    swapped = types.SimpleNamespace(**{k: getattr(jnp, k) for k in dir(jnp) if k[0] != "_"})
    swapped.clip = lambda x, **_: x
    module.jnp = swapped
    try:
        yield
    finally:
        module.jnp = jnp
