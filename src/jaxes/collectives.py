"""Cross-device operations that keep ``shard_map``'s typing of varying axes right.

Under ``jax.shard_map`` (``check_vma=True``, its default) every value is typed as *varying*
along a mesh axis (it may differ between devices) or *invariant* (the same on all of them).
Loop carries must keep their type, so code that starts a carry from a constant (invariant) and
updates it with a device's own members (varying) fails the check. These helpers are no-ops
outside ``shard_map``, so the same code runs on one device, under ``jax.pmap`` and under
``jax.vmap``.
"""

from __future__ import annotations

import jax

from jaxes import compat


def _manual_axes() -> tuple:
    return tuple(jax.sharding.get_abstract_mesh().manual_axes)


def gather_members(values, axis_name):
    """Every device's values for its own members, joined in member order: the population's.

    Each leaf of ``values`` (the fitness, or any pytree of per-member values with a leading
    member axis, e.g. a task's statistics) holds this device's ``P / n`` members; each leaf of
    the result holds all ``P``, device 0's first, the same on every device along ``axis_name``.

    Under ``jax.shard_map`` the result is also *typed* as the same on every device (invariant
    along ``axis_name``: ``jax.lax.all_gather(..., to="invarying")``). A plain
    ``jax.lax.all_gather`` moves the same values but types them as varying; a ``tell`` on them
    then computes a varying new state, and with ``check_vma=True`` (shard_map's default) a
    ``lax.scan`` carry refuses it (``carry input and carry output must have equal types ...
    {V:...}``), as does ``out_specs=PartitionSpec()``, or, for a big state, the ``lax.cond``
    between the new and the old state in ``tell`` (``cond branches must have equal output
    types``). It also works under ``jax.pmap``, and under ``jax.vmap`` with an ``axis_name`` (a
    plain ``all_gather`` there).

    Example (any device count; ``"population"`` is ``jaxes.parallel.make_mesh``'s axis):
      >>> import jax, jax.numpy as jnp
      >>> from jax.sharding import PartitionSpec
      >>> from jaxes.parallel import make_mesh
      >>> mesh = make_mesh()
      >>> n = mesh.devices.size
      >>> gather = jax.shard_map(  # each device: its 2 members in, all 2·n out, replicated
      ...     lambda f: gather_members(f, "population"), mesh=mesh,
      ...     in_specs=PartitionSpec("population"), out_specs=PartitionSpec())
      >>> jax.jit(gather)(jnp.arange(2.0 * n)).tolist() == list(range(2 * n))
      True

    In a loop of one's own (``docs/distributed.md``, ``examples/shard_map_loop.py``):
    ``state, info = strategy.tell(state, gather_members(my_fitness, "d"))``.
    """
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    manual = _manual_axes()
    # Only shard_map's axes are typed; vmap's axis_name would make the invariant gather fail.
    invariant = all(name in manual for name in names)
    return jax.tree.map(
        lambda x: compat.all_gather(x, axis_name, tiled=True, invariant=invariant), values
    )


def varying(tree):
    """``tree`` typed as varying along every ``shard_map`` axis in scope (a no-op outside).

    For the start of a loop carry that the loop then updates with a device's own values.

    Example:
      >>> import jax.numpy as jnp
      >>> varying(jnp.zeros(2)).tolist()  # outside shard_map: unchanged
      [0.0, 0.0]
    """
    axes = _manual_axes()
    if not axes:
        return tree

    def cast(x):
        missing = tuple(a for a in axes if a not in compat.varying_axes(x))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree.map(cast, tree)
