"""Sphinx configuration of the docs site (`make docs`; the output is build/docs).

The source directory is the repository root, so that the guides (docs/*.md), the notebooks
(notebooks/*.ipynb, shown as committed: never executed here) and README.md are read where they
live, and every warning names the file as it is in the repository. Only those are read
(include_patterns); every other top-level folder is skipped without being walked.

The API reference (docs/api.md) is generated from the docstrings: this file writes one page per
public module into docs/_api/ (ignored by git; api_modules.py says which modules are public and
what each page holds), and autodoc fills it from the module's docstring and members at build
time. The pages are written here rather than by autosummary's generator, which takes
``jaxes.strategies.snes`` for the function the package re-exports under that name, not the
module.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

from api_modules import api_page, public_modules  # noqa: E402

project = "jaxes"
author = "the jaxes authors"
copyright = "the jaxes authors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "myst_nb",
]

root_doc = "docs/index"
include_patterns = ["README.md", "docs/**", "notebooks/*"]
exclude_patterns = [
    p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in ("docs", "notebooks")
] + ["docs/_templates", "**/.ipynb_checkpoints"]
# Absolute: the HTML builder reads it from docs/, autosummary from the repository root.
templates_path = [str(ROOT / "docs" / "_templates")]

# Every warning is an error (make docs runs sphinx-build -W --keep-going), and every
# cross-reference must resolve (-n), except to the libraries jaxes builds on: CI has no network
# for their intersphinx inventories, so their names in signatures stay plain text.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(jax|jaxlib|numpy|np|jnp|flax|nn|optax|chex|orbax|brax|gymnax|mujoco)\..*"),
    (r"py:.*", r"(matplotlib|safetensors|tokenizers|jinja2|wandb|mlflow|tensorboardX)\..*"),
    (r"py:.*", r"(collections\.abc|typing|types|pathlib|os|argparse|concurrent)\..*"),
]
# The aliases jaxes.types names its signatures with (``Params = Any``) are module constants,
# not classes: a signature's ``Params`` has no class to link to (jaxes.types describes them).
nitpick_ignore = [
    ("py:class", alias) for alias in ("Params", "Population", "PRNGKey", "Fitness", "State", "Info")
] + [
    ("py:class", "jaxes.tasks.control.episodes.Carry"),  # a TypeVar
    ("py:class", "jaxes.noise.moments._Rows"),  # a private NamedTuple in a signature
    ("py:class", "noise_lib.Perturbations"),  # written through a module alias, kept as written
]

autosummary_generate = False
autodoc_default_options = {"show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# Markdown and notebooks: MyST, notebooks shown as committed.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 4
# docs/results/ (the pages the results renderer writes) may be empty: its glob matches nothing.
suppress_warnings = ["toc.empty_glob"]

html_theme = "furo"
html_title = "jaxes"
# build/docs/index.html sends a browser to the root page, docs/index.html.
html_additional_pages = {"index": "redirect.html"}
html_show_sourcelink = False


# The API pages.
_API = ROOT / "docs" / "_api"


def _write_api_pages(app=None) -> None:
    """One page a public module, rewritten only where it changed (so that an incremental
    build rereads only those); the page of a module that is no longer public goes. Run when
    the builder starts, before Sphinx looks for documents."""
    _API.mkdir(exist_ok=True)
    public = public_modules()
    pages = {f"{name}.rst": api_page(name, public) for name in public}
    for stale in set(p.name for p in _API.glob("*.rst")) - set(pages):
        (_API / stale).unlink()
    for filename, text in pages.items():
        path = _API / filename
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def _skip_field_alias(app, what, name, obj, skip, options):
    """A NamedTuple's field accessors ("Alias for field number 0"): its docstring says it all."""
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def setup(app):
    app.connect("builder-inited", _write_api_pages)
    app.connect("autodoc-skip-member", _skip_field_alias)
