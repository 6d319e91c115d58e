"""Notebooks run from any working directory and on a fresh install: no code cell reaches into
the checkout (``examples/``, ``sys.path``, ``JAXES_SOURCE``, a path relative to the working
directory), and what they import from the library loads with no path set up.

(The notebooks' own tests run them from the repository root or from ``notebooks/``; see
tests/notebook_runner.py.)
"""

import ast
import os
import re
import subprocess
import sys

import nbformat
import pytest
from notebook_runner import NOTEBOOKS

# Text no code cell may contain: each ties a notebook to a checkout or a working directory.
FORBIDDEN = (
    "examples/",
    "sys.path",
    "JAXES_SOURCE",
    "__file__",
    "getcwd",
    "chdir",
    "abspath",
    "Path.cwd",
)
# A string literal that names a file or folder under the working directory: "..", "./runs",
# "data/x.csv" (a file), "docs/figures" (a folder of the checkout). Labels such as
# "decisions/episode" are none of these.
DOTTED = re.compile(r"\.\.?(/.*)?")
SLASHED = re.compile(r"([\w.-]+)(/[\w.-]+)+/?")


def is_relative_path(text: str, checkout=NOTEBOOKS.parent) -> bool:
    if DOTTED.fullmatch(text):
        return True
    match = SLASHED.fullmatch(text)
    if match is None:  # an absolute path starts with "/" and does not match
        return False
    first = match[1]
    return bool(re.search(r"\.\w+$", text)) or any(
        (folder / first).exists() for folder in (checkout, checkout / "notebooks")
    )


def problems(source: str) -> list[str]:
    """What in one code cell's ``source`` depends on where the notebook runs."""
    found = [f"mentions {text}" for text in FORBIDDEN if text in source]
    # IPython's %magics and !commands are not Python.
    code = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )
    strings = (
        node.value
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    )
    found += [f"relative path {text!r}" for text in strings if is_relative_path(text)]
    return found


def test_the_check_catches_the_old_digits_import():
    old = (
        'examples = os.path.abspath(os.path.join("..", "examples"))\n'
        "sys.path.insert(0, examples)\n"
        "import digits\n"
    )
    assert problems(old) == [
        "mentions sys.path",
        "mentions abspath",
        "relative path '..'",
    ]
    assert problems('data = load("data/train.csv")') == ["relative path 'data/train.csv'"]
    assert problems('open("docs/api.md")') == ["relative path 'docs/api.md'"]
    assert problems('run(out="src/jaxes")') == ["relative path 'src/jaxes'"]
    assert problems('ax.set(ylabel="decisions/episode")\nopen("/tmp/x/y")') == []
    assert problems('%pip install "jaxes[plot]"\nroot = tempfile.mkdtemp()') == []


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_no_code_cell_depends_on_the_working_directory(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    found = {
        index: problems(cell.source)
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
    }
    assert {index: p for index, p in found.items() if p} == {}


def test_the_digits_task_loads_with_no_path_from_the_checkout(tmp_path):
    """The fresh-install case: another working directory, no PYTHONPATH, no JAXES_SOURCE."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAXES_SOURCE")}
    script = (
        "import sys\n"
        "from jaxes.tasks import classification\n"
        "from jaxes.training import classifier\n"
        "data = classification.digits()\n"
        "layers = classifier.CONFIGS['full-rank'].layers\n"
        "print(data['x_train'].shape, data['x_test'].shape, layers)\n"
        "print(any('examples' in p for p in sys.path))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert out.splitlines() == ["(1437, 64) (360, 64) 64-64-10", "False"], out


# Where a notebook's code shows it uses an extra: a module or function of it, or a string that
# names one of its environments (a TrainConfig's env).
EXTRA_SIGNS = {
    "brax": re.compile(r"\bbrax\b|brax_task|brax_envs"),
    "gymnax": re.compile(r"\bgymnax\b|gymnax_task"),
    "plot": re.compile(r"\bmatplotlib\b|\bplotting\b"),
    "digits": re.compile(r"\bclassification\b|\bclassifier\b"),
}


def extras_used(code: str) -> set[str]:
    from jaxes.tasks import brax, gymnax

    strings = set(re.findall(r"[\"']([\w-]+)[\"']", code))
    found = {extra for extra, sign in EXTRA_SIGNS.items() if sign.search(code)}
    found |= {"brax"} if strings & set(brax.env_names()) else set()
    found |= {"gymnax"} if strings & set(gymnax.env_names()) else set()
    return found


def test_extras_used_reads_imports_and_env_names():
    assert extras_used('cfg = TrainConfig(env="hopper")\nimport matplotlib.pyplot') == {
        "brax",
        "plot",
    }
    assert extras_used("TrainConfig(env='Breakout-MinAtar')") == {"gymnax"}
    assert extras_used("from jaxes.training import classifier") == {"digits"}
    assert extras_used("import jax") == set()


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_the_first_cell_names_and_checks_the_extras_the_code_needs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    first, *rest = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    used = extras_used("\n".join(rest))
    named = {frozenset(group.split(",")) for group in re.findall(r"jaxes\[([\w,]+)\]", first)}
    assert named == {frozenset(used)}, f"{name}: first cell names {named}, code uses {used}"
    checked = set(ast.literal_eval(re.search(r"needed = (\[.*?\])", first).group(1)))
    modules = {"brax": "brax", "gymnax": "gymnax", "plot": "matplotlib", "digits": "sklearn"}
    assert checked == {"jaxes", *(modules[e] for e in used)}, name
