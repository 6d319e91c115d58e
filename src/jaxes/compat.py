"""What differs between the JAX versions jaxes supports, in one place.

jaxes declares ``jax>=FLOOR`` (pyproject.toml) and no upper cap; ``make test`` runs the whole
suite on the locked set (requirements/locked.txt) and ``make test-compat`` a core subset on the
floor versions (requirements/floor.txt). The rest of the package calls these instead of testing
versions itself:

- ``require_supported_jax``: a JAX below the floor is one ``ImportError`` line at
  ``import jaxes`` naming the supported range, not an ``AttributeError`` from deep inside.
  It reads the installed versions from package metadata, without importing JAX: this module
  imports JAX only inside the functions that use it, so that ``import jaxes`` (and
  ``jaxes --version``) stays free of it.
- ``varying_axes``: the manual axes a value varies over inside ``shard_map``
  (``jax.typeof(x).vma`` up to jax 0.9, ``jax.typeof(x).mat.varying`` from 0.10).
- ``clip``: ``jnp.clip`` accepting NumPy's old ``a_min``/``a_max`` keywords, which jax 0.10
  removed and Brax 0.14's fluid model still passes.
- ``all_gather``: ``jax.lax.all_gather``, optionally typed invariant along the axis
  (``to="invarying"`` from jax 0.10; before, the same primitive was only
  ``jax._src.lax.parallel.all_gather_invariant``).
- ``backends_started``: whether JAX has started its backends (then the CPU device count is
  fixed); JAX has no public name for it.
"""

from __future__ import annotations

import importlib.metadata
import re

_REQUIREMENT = re.compile(r"^jax\s*>=\s*([0-9][0-9.]*)\s*$")


class UnsupportedJax(ImportError):
    """The installed JAX is older than the oldest version jaxes is tested on."""


def version_tuple(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string, for comparing releases.

    Example:
      >>> version_tuple("0.10.2"), version_tuple("0.9.0.1"), version_tuple("0.11.0.dev20261201")
      ((0, 10, 2), (0, 9, 0, 1), (0, 11, 0))
    """
    numbers = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if not digits:
            break
        numbers.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(numbers)


def jax_floor() -> str | None:
    """The oldest JAX jaxes supports, as its installed metadata declares it (``None`` when
    jaxes runs from a source tree without metadata).

    Example:
      >>> version_tuple(jax_floor()) <= version_tuple(jax_version())
      True
    """
    try:
        requirements = importlib.metadata.requires("jaxes") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement.split(";")[0].strip())
        if match:
            return match.group(1)
    return None


def check_jax(version: str, floor: str | None) -> None:
    """``UnsupportedJax`` with one line naming the supported range when ``version`` is below
    ``floor``.

    Example:
      >>> check_jax("0.10.2", "0.9.0")
      >>> check_jax("0.8.1", "0.9.0")
      Traceback (most recent call last):
        ...
      jaxes.compat.UnsupportedJax: jaxes supports jax >= 0.9.0, and this environment has jax \
0.8.1: pip install -U 'jax>=0.9.0' (for a GPU or TPU, follow JAX's own install instructions)
    """
    if floor is not None and version_tuple(version) < version_tuple(floor):
        raise UnsupportedJax(
            f"jaxes supports jax >= {floor}, and this environment has jax {version}: "
            f"pip install -U 'jax>={floor}' (for a GPU or TPU, follow JAX's own install "
            "instructions)"
        )


def jax_version() -> str:
    """The installed JAX's version, from its package metadata (no ``import jax``); a JAX
    without metadata (a source tree on ``sys.path``) is imported to read ``jax.__version__``.

    Example:
      >>> import jax
      >>> jax_version() == jax.__version__
      True
    """
    try:
        return importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        import jax

        return jax.__version__


def require_supported_jax() -> None:
    """``check_jax`` for the installed JAX and jaxes's declared floor."""
    check_jax(jax_version(), jax_floor())


def varying_axes(x) -> frozenset:
    """The ``shard_map`` axes ``x`` varies over (empty outside ``shard_map``).

    Example:
      >>> import jax
      >>> varying_axes(jax.numpy.zeros(2))
      frozenset()
    """
    import jax

    aval = jax.typeof(x)
    mat = getattr(aval, "mat", None)
    return frozenset(mat.varying if mat is not None else getattr(aval, "vma", ()))


def clip(x, a_min=None, a_max=None, *, min=None, max=None):  # noqa: A002 - jnp.clip's names
    """``jnp.clip`` that also takes NumPy's old ``a_min``/``a_max`` keywords.

    Example:
      >>> import jax.numpy as jnp
      >>> clip(jnp.arange(4.0), a_min=1.0, a_max=2.0).tolist()
      [1.0, 1.0, 2.0, 2.0]
    """
    import jax.numpy as jnp

    return jnp.clip(x, min if a_min is None else a_min, max if a_max is None else a_max)


def all_gather(x, axis_name, *, tiled: bool, invariant: bool):
    """``jax.lax.all_gather``; with ``invariant``, its result is typed as the same on every
    device along ``axis_name`` (inside ``shard_map`` only).

    Example:
      >>> import jax, jax.numpy as jnp, numpy as np
      >>> gathered = jax.vmap(lambda x: all_gather(x, "i", tiled=True, invariant=False),
      ...                     axis_name="i")(jnp.arange(4.0).reshape(2, 2))
      >>> np.asarray(gathered).tolist()
      [[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]]
    """
    import jax

    if not invariant:
        return jax.lax.all_gather(x, axis_name, tiled=tiled)
    if version_tuple(jax.__version__) >= (0, 10):
        return jax.lax.all_gather(x, axis_name, tiled=tiled, to="invarying")
    from jax._src.lax.parallel import all_gather_invariant

    return all_gather_invariant(x, axis_name, tiled=tiled)


def backends_started() -> bool:
    """Whether JAX has started its backends (after which the CPU device count is fixed).

    Example:
      >>> import jax
      >>> _ = jax.devices(); backends_started()
      True
    """
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()
