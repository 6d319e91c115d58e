"""Notebooks run from any working directory and on a fresh install: no code cell reaches into
the checkout (``examples/``, ``sys.path``, ``JAXES_SOURCE``, a path relative to the working
directory), and what they import from the library and from the examples' distribution
(``jaxes_examples``, examples/pyproject.toml) loads with no path set up.

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


def test_the_examples_package_loads_with_no_path_from_the_checkout(tmp_path):
    """The fresh-install case: another working directory, no PYTHONPATH, no JAXES_SOURCE; the
    installed jaxes-examples distribution imports, and no ``examples`` folder is on sys.path
    (its scripts, ``digits.py`` and the like, are not modules of it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAXES_SOURCE")}
    script = (
        "import importlib.util, sys\n"
        "from jaxes_examples.countdown import finetune, pretrain, problems\n"
        "from jaxes_examples.digits import classifier, data\n"
        "digits = data.digits()\n"
        "layers = classifier.CONFIGS['full-rank'].layers\n"
        "print(digits['x_train'].shape, digits['x_test'].shape, layers)\n"
        "print(len(problems.problems()), len(finetune.METHODS), pretrain.Setup().d_model)\n"
        "print(any('examples' in p for p in sys.path), importlib.util.find_spec('digits'))\n"
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
    assert out.splitlines() == ["(1437, 64) (360, 64) 64-64-10", "242 7 32", "False None"], out


# Where a notebook's code shows it uses an extra: a module or function of it, or a string that
# names one of its environments (a TrainConfig's env).
EXTRA_SIGNS = {
    "brax": re.compile(r"\bbrax\b|brax_task|brax_envs"),
    "gymnax": re.compile(r"\bgymnax\b|gymnax_task"),
    "plot": re.compile(r"\bmatplotlib\b|\bplotting\b"),
    "llm": re.compile(r"\bjaxes\.llm\b|from jaxes import llm"),
}
# A notebook whose code imports the examples' package installs its distribution too: from the
# repository's examples/ folder on a hosted notebook (a comment line of the first cell, with the
# URL left for the reader), with `pip install -e examples` in a checkout.
EXAMPLES = re.compile(r"\bjaxes_examples\b")
EXAMPLES_INSTALL = '"jaxes-examples @ git+<URL of your jaxes repository>#subdirectory=examples"'


def extras_used(code: str) -> set[str]:
    from jaxes.tasks import brax, gymnax

    strings = set(re.findall(r"[\"']([\w-]+)[\"']", code))
    found = {extra for extra, sign in EXTRA_SIGNS.items() if sign.search(code)}
    found |= {"brax"} if strings & set(brax.env_names()) else set()
    found |= {"gymnax"} if strings & set(gymnax.env_names()) else set()
    return found


def test_extras_used_reads_imports_and_env_names():
    assert extras_used('cfg = TrainConfig.make(env="hopper")\nimport matplotlib.pyplot') == {
        "brax",
        "plot",
    }
    assert extras_used("TrainConfig.make(env='Breakout-MinAtar')") == {"gymnax"}
    assert extras_used("from jaxes_examples.digits import classifier") == set()
    assert extras_used("import jax") == set()


def first_cell_problems(first: str, code: str) -> list[str]:
    """What the first code cell ``first`` fails to name or check of what the rest of the
    notebook's ``code`` needs (its extras, and the examples' distribution if it imports
    ``jaxes_examples``), or names without a need."""
    found = []
    used = extras_used(code)
    named = {frozenset(group.split(",")) for group in re.findall(r"jaxes\[([\w,]+)\]", first)}
    if named != {frozenset(used)}:
        found.append(f"names extras {sorted(map(sorted, named))}, code uses {sorted(used)}")
    modules = {"brax": "brax", "gymnax": "gymnax", "plot": "matplotlib", "llm": "safetensors"}
    expected = {"jaxes", *(modules[e] for e in used)}
    examples = bool(EXAMPLES.search(code))
    if examples:
        expected.add("jaxes_examples")
    for text in (EXAMPLES_INSTALL, "-e examples"):
        if examples and text not in first:
            found.append(f"code imports jaxes_examples, no {text}")
        if not examples and text in first:
            found.append(f"{text}, code does not import jaxes_examples")
    needed = re.search(r"needed = (\[.*?\])", first)
    checked = set(ast.literal_eval(needed.group(1))) if needed else set()
    if checked != expected:
        found.append(f"checks {sorted(checked)}, needs {sorted(expected)}")
    return found


def test_the_first_cell_check_catches_a_missing_examples_install():
    code = "from jaxes_examples.digits import classifier\nimport matplotlib.pyplot as plt\n"
    # The cell as it was when the digits code was in jaxes, behind a `digits` extra.
    old = (
        '#   %pip install "jaxes[plot,digits] @ git+<URL of your jaxes repository>"\n'
        '# or `pip install -e ".[plot,digits]"` in a checkout.\n'
        'needed = ["jaxes", "sklearn", "matplotlib"]\n'
    )
    assert first_cell_problems(old, code) == [
        "names extras [['digits', 'plot']], code uses ['plot']",
        f"code imports jaxes_examples, no {EXAMPLES_INSTALL}",
        "code imports jaxes_examples, no -e examples",
        "checks ['jaxes', 'matplotlib', 'sklearn'], needs "
        "['jaxes', 'jaxes_examples', 'matplotlib']",
    ]
    new = (
        '#   %pip install "jaxes[plot] @ git+<URL of your jaxes repository>" \\\n'
        f"#     {EXAMPLES_INSTALL}\n"
        '# or `pip install -e ".[plot]" -e examples` in a checkout.\n'
        'needed = ["jaxes", "jaxes_examples", "matplotlib"]\n'
    )
    assert first_cell_problems(new, code) == []
    # A notebook that does not import the examples' package does not ask for it.
    assert first_cell_problems(new, "import matplotlib") == [
        f"{EXAMPLES_INSTALL}, code does not import jaxes_examples",
        "-e examples, code does not import jaxes_examples",
        "checks ['jaxes', 'jaxes_examples', 'matplotlib'], needs ['jaxes', 'matplotlib']",
    ]


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_the_first_cell_names_and_checks_the_extras_the_code_needs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    first, *rest = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    assert first_cell_problems(first, "\n".join(rest)) == [], name
