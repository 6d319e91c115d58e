"""Plots (matplotlib, the ``plot`` extra): learning curves and the centre-of-mass picture.

Nothing here touches pyplot's global backend. Functions that write a file draw on a bare
``matplotlib.figure.Figure`` (rendered by Agg), so they work headless, in a training run and
in a notebook alike; ``centre_of_mass`` without ``ax`` or ``png_path`` uses pyplot, so a
Jupyter kernel shows the figure inline.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxes import centroid
from jaxes import shaping as shaping_lib
from jaxes.extras import require

require("matplotlib", "plot", "figures")
from matplotlib.axes import Axes  # noqa: E402 - after the extra's one-line check
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402


def read_metrics(path: str) -> list[dict]:
    """The lines of a ``metrics.jsonl`` file as dicts.

    Example:
      >>> import json, os, tempfile
      >>> path = os.path.join(tempfile.mkdtemp(), "metrics.jsonl")
      >>> with open(path, "w") as f:
      ...     _ = f.write(json.dumps({"generation": 1, "fitness_mean": 2.0}) + "\\n")
      >>> read_metrics(path)
      [{'generation': 1, 'fitness_mean': 2.0}]
    """
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def learning_curve(metrics_path: str, png_path: str, title: str | None = None) -> str:
    """Population mean/max fitness per generation and the noise-free evaluation return.

    Writes a 700 × 400 pixel PNG and returns the path written.

    Example:
      >>> import json, os, tempfile
      >>> folder = tempfile.mkdtemp()
      >>> with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
      ...     for g in (1, 2):
      ...         _ = f.write(json.dumps({"generation": g, "fitness_mean": g, "fitness_max": 2 * g,
      ...                                 "eval_return": 3.0 * g}) + "\\n")
      >>> png = learning_curve(os.path.join(folder, "metrics.jsonl"), os.path.join(folder, "c.png"))
      >>> os.path.getsize(png) > 0
      True
    """
    lines = read_metrics(metrics_path)
    if not lines:
        raise ValueError(f"metrics_path: {metrics_path} has no generations to plot")
    gens = [x["generation"] for x in lines]
    fig = Figure(figsize=(7, 4), dpi=100)
    ax = fig.subplots()
    ax.plot(gens, [x["fitness_mean"] for x in lines], label="population mean", lw=1)
    ax.plot(gens, [x["fitness_max"] for x in lines], label="population max", lw=1, alpha=0.6)
    evals = [(x["generation"], x["eval_return"]) for x in lines if x.get("eval_return") is not None]
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label="centre, noise-free eval", lw=2)
    ax.set_xlabel("generation")
    ax.set_ylabel("episode return")
    ax.set_title(title or "jaxes learning curve")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)
    return png_path


def seed_curves(
    metrics_paths: Sequence[str], labels: Sequence, png_path: str, title: str | None = None
) -> str:
    """The noise-free evaluation return of several runs (one line per seed) against the env
    steps of training (``total_env_steps``; generations for runs without it).

    Example:
      >>> import json, os, tempfile
      >>> folder = tempfile.mkdtemp()
      >>> paths = [os.path.join(folder, f"{s}.jsonl") for s in (0, 1)]
      >>> for s, path in enumerate(paths):
      ...     with open(path, "w") as f:
      ...         _ = f.write(json.dumps({"generation": 1, "total_env_steps": 10,
      ...                                 "eval_return": 1.0 + s}) + "\\n")
      >>> os.path.getsize(seed_curves(paths, [0, 1], os.path.join(folder, "s.png"))) > 0
      True
    """
    fig = Figure(figsize=(7, 4), dpi=100)
    ax = fig.subplots()
    axis = "generation"
    for path, label in zip(metrics_paths, labels, strict=True):
        evals = [x for x in read_metrics(path) if x.get("eval_return") is not None]
        axis = "total_env_steps" if evals and "total_env_steps" in evals[0] else "generation"
        ax.plot(
            [x[axis] for x in evals],
            [x["eval_return"] for x in evals],
            lw=1.2,
            label=f"seed {label}",
        )
    ax.set_xlabel("env steps" if axis == "total_env_steps" else "generation")
    ax.set_ylabel("noise-free eval return")
    ax.set_title(title or "jaxes learning curves, every seed")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)
    return png_path


def _flat_params(params) -> np.ndarray:
    leaves = jax.tree.leaves(params)
    if not leaves:
        raise ValueError("params: expected an array or a pytree with at least one leaf")
    return np.concatenate([np.asarray(x, np.float64).reshape(-1) for x in leaves])


def _flat_population(population, params) -> np.ndarray:
    """``(P, D)`` rows in the leaf order of ``params`` (that of ``ravel_pytree``)."""
    if jax.tree.structure(population) != jax.tree.structure(params):
        raise ValueError(
            "population: expected the same pytree structure as params with a leading axis P, "
            f"got {jax.tree.structure(population)} for params {jax.tree.structure(params)}"
        )
    rows, size = [], None
    for path, member, leaf in zip(
        jax.tree_util.tree_leaves_with_path(population),
        jax.tree.leaves(population),
        jax.tree.leaves(params),
        strict=True,
    ):
        member = np.asarray(member, np.float64)
        name = jax.tree_util.keystr(path[0]) or "<root>"
        if member.ndim < 1 or member.shape[1:] != np.shape(leaf):
            raise ValueError(
                f"population: leaf {name} has shape {member.shape}; expected (P, *"
                f"{np.shape(leaf)}) (the params leaf with a leading population axis)"
            )
        if size is not None and member.shape[0] != size:
            raise ValueError(
                f"population: leaf {name} has {member.shape[0]} members, other leaves {size}"
            )
        size = member.shape[0]
        rows.append(member.reshape(size, -1))
    return np.concatenate(rows, axis=1)


def _check_dims(dims, dim: int) -> tuple[int, int]:
    if (
        isinstance(dims, str)
        or not isinstance(dims, Sequence)
        or len(dims) != 2
        or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims)
    ):
        raise ValueError(f"dims: expected two coordinate indices like (0, 1), got {dims!r}")
    a, b = (int(d) for d in dims)
    if not (0 <= a < dim and 0 <= b < dim):
        raise ValueError(
            f"dims: indices must lie in [0, {dim}) (the flattened parameter vector has {dim} "
            f"coordinates), got {dims!r}"
        )
    if a == b:
        raise ValueError(f"dims: expected two distinct coordinates, got {dims!r}")
    return a, b


def centre_of_mass(
    population,
    params,
    fitness,
    *,
    shaping: str | Callable | None = "centered_rank",
    dims: tuple[int, int] = (0, 1),
    ax: Axes | None = None,
    png_path: str | None = None,
    figsize: tuple[float, float] = (6.0, 6.0),
    dpi: int = 100,
    title: str | None = None,
) -> Axes | str:
    """The centre-of-mass picture of one population, in the plane of two coordinates.

    Draws the sampled members ``x_i`` (grey dots) with a disc of area proportional to the mass
    ``m_i = w_i - min_j w_j`` (``w`` the shaped fitness), the model ``θ``, the plain centroid
    ``c = θ + (1/P) Σ δ_i``, the reward-weighted centre of mass ``M = θ + Σ m_i δ_i / Σ m_i``
    (with ``δ_i = x_i - θ``), and two arrows: ``M - θ`` from the model (the step without mean
    subtraction, up to the factor ``m̄/σ²``) and ``M - c`` from the centroid (the mean-subtracted
    ES step, up to the same factor). See ``docs/maths.md``. Everything is computed on the full
    flattened vector and then projected, so the picture is the exact 2-D slice.

    Args:
      population: the members, an array ``(P, D)`` or a pytree like ``params`` whose leaves
        have a leading axis ``P`` (what ``Strategy.ask`` returns).
      params: the model ``θ``, an array or pytree; pytrees are flattened in leaf order (the
        order of ``jax.flatten_util.ravel_pytree``).
      fitness: ``(P,)`` fitness (maximised), or the weights themselves when ``shaping=None``.
      shaping: how fitness becomes weights: a name (``"centered_rank"``, ``"z_score"``,
        ``"raw"``, ``"log_rank"``) or a callable; ``None`` uses ``fitness`` as the weights.
      dims: the two coordinates of the flattened vector to draw (x axis, y axis).
      ax: draw into these axes; by default a new figure is made (pyplot's, so a notebook shows
        it inline, or a bare ``Figure`` when only ``png_path`` is wanted).
      png_path: write the figure there as a PNG (``figsize * dpi`` pixels for a new figure).
      figsize, dpi: size of a new figure.
      title: axes title (default: which coordinates are shown).

    Returns:
      ``png_path`` when given, else the ``Axes`` drawn on.

    Raises:
      ValueError: naming the argument, when the input is not a 2-D slice of a population:
        ``dims`` not two distinct indices of the flattened vector, a flattened vector with
        fewer than 2 coordinates, fewer than 2 members, population and params that do not
        match, fitness not of shape ``(P,)``, or non-finite weights with ``shaping=None``.

    Example:
      >>> import os, tempfile, jax, jax.numpy as jnp
      >>> theta = jnp.zeros(3)
      >>> population = theta + 0.1 * jax.random.normal(jax.random.key(0), (16, 3))
      >>> fitness = -jnp.sum((population - 1.0) ** 2, axis=1)
      >>> png = os.path.join(tempfile.mkdtemp(), "com.png")
      >>> centre_of_mass(population, theta, fitness, dims=(0, 2), png_path=png) == png
      True
      >>> os.path.getsize(png) > 0
      True
      >>> from matplotlib.figure import Figure
      >>> ax = centre_of_mass(population, theta, fitness, ax=Figure().subplots())
      >>> ax.get_xlabel()
      'coordinate 0'
    """
    theta = _flat_params(params)
    dim = theta.shape[0]
    if dim < 2:
        raise ValueError(
            f"params: the flattened parameter vector has {dim} coordinate; the centre-of-mass "
            "picture needs at least 2"
        )
    x = _flat_population(population, params)
    p = x.shape[0]
    if p < 2:
        raise ValueError(f"population: expected at least 2 members, got {p}")
    a, b = _check_dims(dims, dim)
    mass = _masses(fitness, shaping, p)

    delta = x[:, [a, b]] - theta[[a, b]]
    moments = centroid.moments(jnp.asarray(delta, jnp.float32), jnp.asarray(mass, jnp.float32))
    origin = theta[[a, b]]
    c = origin + np.asarray(centroid.plain_centroid(moments), np.float64)
    com = origin + np.asarray(centroid.centre_of_mass(moments), np.float64)

    fig = None
    if ax is None:
        if png_path is None:
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=figsize, dpi=dpi)
        else:
            fig = Figure(figsize=figsize, dpi=dpi)
            ax = fig.subplots()
    pts = x[:, [a, b]]
    top = mass.max()
    area = 250.0 * mass / top if top > 0 else np.zeros_like(mass)
    ax.scatter(pts[:, 0], pts[:, 1], s=area, color="tab:orange", alpha=0.45, lw=0, zorder=2)
    ax.scatter(pts[:, 0], pts[:, 1], s=6, color="0.35", lw=0, zorder=3)
    ax.scatter(*origin, marker="s", s=70, color="black", zorder=5)
    ax.scatter(*c, marker="D", s=60, facecolor="none", edgecolor="tab:blue", lw=2, zorder=6)
    ax.scatter(*com, marker="*", s=220, color="tab:red", zorder=6)
    for start, colour in ((origin, "black"), (c, "tab:blue")):
        if np.any(com != start):
            ax.annotate(
                "",
                xy=tuple(com),
                xytext=tuple(start),
                arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2, "shrinkA": 0},
                zorder=7,
            )
    ax.legend(*_legend(), loc="best", fontsize="small", framealpha=0.8)
    ax.set_xlabel(f"coordinate {a}")
    ax.set_ylabel(f"coordinate {b}")
    ax.set_title(title or f"centre of mass, coordinates ({a}, {b})")
    ax.set_aspect("equal", adjustable="datalim")
    ax.grid(alpha=0.3)
    if png_path is not None:
        (fig or ax.figure).savefig(png_path)
        return png_path
    return ax


def _masses(fitness, shaping, p: int) -> np.ndarray:
    """The masses ``w_i - min_j w_j`` of ``(P,)`` fitness, shaped as ``centre_of_mass`` says."""
    values = np.asarray(fitness)
    if values.shape != (p,):
        raise ValueError(
            f"fitness: expected shape ({p},) (one value per member), got {values.shape}"
        )
    if shaping is None:
        if not np.all(np.isfinite(values)):
            raise ValueError("fitness: weights (shaping=None) must all be finite")
        weights = values.astype(np.float64)
    else:
        weights = np.asarray(shaping_lib.get_shaping(shaping)(jnp.asarray(values)), np.float64)
    return weights - weights.min()


def _legend() -> tuple[list, list[str]]:
    """The handles and labels of the centre-of-mass picture's legend."""
    handles = [
        Line2D([], [], ls="", marker="o", color="tab:orange", alpha=0.45, ms=10),
        Line2D([], [], ls="", marker="s", color="black"),
        Line2D([], [], ls="", marker="D", mfc="none", mec="tab:blue", mew=2),
        Line2D([], [], ls="", marker="*", color="tab:red", ms=12),
        Line2D([], [], color="black", lw=2),
        Line2D([], [], color="tab:blue", lw=2),
    ]
    labels = [
        "members (area = mass)",
        "model θ",
        "plain centroid c",
        "centre of mass M",
        "M − θ (from the model)",
        "M − c (from the centroid)",
    ]
    return handles, labels
