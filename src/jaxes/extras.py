"""The package's extras: optional dependencies, imported only where a feature uses them.

``jaxes`` itself needs JAX, flax, optax and orbax. Brax and MuJoCo, gymnax and matplotlib are
extras (``pip install 'jaxes[brax]'``), so a user who optimises their own function never
installs physics. A feature whose extra is missing raises ``MissingExtra``, an ``ImportError``
whose one line names the extra; the ``jaxes`` command prints that line.
"""

from __future__ import annotations

import importlib
import types

# extra -> the top-level modules it installs (a missing one means the extra is missing).
MODULES = {
    "brax": ("brax", "mujoco"),
    "gymnax": ("gymnax", "gymnasium", "six"),
    "plot": ("matplotlib",),
    # Hugging Face checkpoints, tokenizers and chat templates (jaxes.llm).
    "llm": ("safetensors", "tokenizers", "jinja2"),
    # Experiment trackers (jaxes.training.trackers).
    "tensorboard": ("tensorboardX",),
    "wandb": ("wandb",),
    "mlflow": ("mlflow", "sqlalchemy", "alembic"),  # the last two: MLflow's SQLite store
    # The progress line redrawn in place inside Jupyter (jaxes.training.progress).
    "notebook": ("IPython",),
}


class MissingExtra(ImportError):
    """A feature's optional dependency is not installed; the message says which extra."""


def require(module: str, extra: str, feature: str) -> types.ModuleType:
    """``module``, imported, or a ``MissingExtra`` naming ``extra`` when it (or a module of
    the same extra that it needs) is not installed. Any other import failure is raised as it
    is: an installed but broken library is not a missing extra.

    Example:
      >>> require("json", "plot", "figures").__name__
      'json'
      >>> require("matplotlib_absent", "plot", "figures")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.extras.MissingExtra: figures need the 'plot' extra: pip install 'jaxes[plot]' ...
    """
    if extra not in MODULES:
        raise ValueError(f"extra: unknown {extra!r}; known: {sorted(MODULES)}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if top != module.split(".")[0] and top not in MODULES[extra]:
            raise
        raise MissingExtra(
            f"{feature} need the {extra!r} extra: pip install 'jaxes[{extra}]' "
            f"(no module named {top!r})"
        ) from err
