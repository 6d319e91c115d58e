"""Every third-party module the code and the notebooks import comes from a dependency that a
pyproject.toml of this repository declares, and importing a core module of the library needs no
extra.

The declarations are read from the working tree's two pyproject.toml files (tomllib): jaxes's
core dependencies and extras, and jaxes-examples's (examples/pyproject.toml). Installed metadata
would not do: a venv that once held a package keeps it, so a test that imports an undeclared one
passes on the developer's machine and fails on CI's clean one (chex did: tests imported it,
nothing declared it). The imports are read from the source (AST): the library, the tests, the
examples and the notebooks' code cells (their ``!`` and ``%`` lines dropped).

Core and extras: an extra's package is imported inside the function that uses it (through
``jaxes.extras.require``), so a user without the extra imports every core module. Only the
modules that belong to an extra (``HOMES``, as pyproject.toml's comments name them) may import
their own extra's packages when they are imported: ``jaxes.plotting`` imports matplotlib after
its one-line check. ``make test-compat``'s bare install runs only what tests/test_install.py
imports; this reads every module, and follows the jaxes modules each one imports when imported.
"""

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
NOTEBOOKS = ROOT / "notebooks"
JAXES = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXAMPLES = tomllib.loads((ROOT / "examples" / "pyproject.toml").read_text())["project"]
# The extras `make test` installs (with -e ./examples); benchmarks/ also need `bench`, which the
# suite does not install.
TESTED_EXTRAS = ("brax", "gymnax", "plot", "dev")
# The library's optional features: every extra but the tools to develop, document and
# benchmark it.
FEATURES = tuple(sorted(set(JAXES["optional-dependencies"]) - {"dev", "docs", "bench"}))
# The two distributions of this repository, by the names they are imported as.
OURS = {"jaxes", "jaxes_examples"}
# Import name -> distribution, where the two differ (otherwise they are the same name, up to
# case, "-", "_" and "."). A new import of such a package adds its line here.
DISTRIBUTIONS = {
    "absl": "absl-py",
    "orbax": "orbax-checkpoint",
    "mlflow": "mlflow-skinny",
    "IPython": "ipython",
    "sklearn": "scikit-learn",
    "yaml": "PyYAML",
    "cocoex": "coco-experiment",
}
# The modules (and packages: their submodules too) that belong to extras, as pyproject.toml's
# comments say: they may import those extras' packages when they are imported.
HOMES = {
    "jaxes.tasks.brax": ("brax",),
    "jaxes.tasks.gymnax": ("gymnax",),
    "jaxes.plotting": ("plot",),
    "jaxes.llm": ("llm",),
    "jaxes.training.trackers": ("tensorboard", "wandb", "mlflow"),
    "jaxes.training.progress": ("notebook",),
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution(module: str) -> str:
    """The distribution (canonical name) that a top-level import name comes from.

    Example:
      >>> distribution("sklearn"), distribution("tensorboardX"), distribution("jax")
      ('scikit-learn', 'tensorboardx', 'jax')
    """
    return canonical(DISTRIBUTIONS.get(module, module))


def declared(groups: tuple[str, ...], project: dict = JAXES) -> set[str]:
    """The distributions (canonical names) a pyproject.toml's ``project`` table declares in
    ``groups`` (``"core"``: its dependencies; otherwise an extra's name). Not transitive, except
    that a requirement of jaxes with extras (``dev``'s ``jaxes[tensorboard,wandb,mlflow,llm]``,
    jaxes-examples's ``jaxes[llm]``) brings jaxes's core and those extras in."""
    names = set()
    for group in groups:
        if group == "core":
            requirements = project["dependencies"]
        else:
            requirements = project["optional-dependencies"][group]
        for requirement in requirements:
            parsed = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", requirement)
            name = canonical(parsed[1])
            if name == "jaxes":
                wanted = tuple(e.strip() for e in (parsed[2] or "").split(",") if e.strip())
                names |= declared(("core", *wanted))
            else:
                names.add(name)
    return names


def without_magics(source: str) -> str:
    """A notebook cell's code with IPython's ``%magic`` and ``!command`` lines blanked."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def imported(source: str) -> set[str]:
    """The top-level names of every absolute import in ``source``, wherever it is."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def third_party(sources: dict[str, str], local: set[str] = frozenset()) -> dict[str, set[str]]:
    """{top-level module: the names of the sources importing it}, less the standard library,
    ours and ``local`` (files that tests put on sys.path)."""
    out: dict[str, set[str]] = {}
    for where, source in sources.items():
        for module in imported(source) - set(sys.stdlib_module_names) - local - OURS:
            out.setdefault(module, set()).add(where)
    return out


def undeclared(imports: dict[str, set[str]], allowed: set[str]) -> list[str]:
    return [
        f"{module} (distribution {distribution(module)}) imported by "
        + ", ".join(sorted(files)[:3])
        for module, files in sorted(imports.items())
        if distribution(module) not in allowed
    ]


def python_files(folder: Path) -> dict[str, str]:
    # tests/fixtures/*/make_*.py make the fixtures in a venv of their own (transformers and
    # PyTorch, which make test never installs), and no test imports them.
    paths = [p for p in sorted(folder.rglob("*.py")) if "fixtures" not in p.parts]
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths}


def notebook_code(path: Path) -> str:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cells = [without_magics(c.source) for c in nb.cells if c.cell_type == "code"]
    return "\n\n".join(cells)


# ------------------------------------------------------------------ imported when imported


def library_modules(src: Path = SRC) -> dict[str, Path]:
    """{dotted name: file} of every module of the packages under ``src``."""
    modules = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def run_at_import(body: list[ast.stmt]):
    """The import statements Python runs when the module is imported: at the top, in the
    branches of ``if``/``try``/``with``/loops and in class bodies; not in functions, and not
    under ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from run_at_import(node.orelse)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    yield from run_at_import(
                        [c for child in children for c in getattr(child, "body", [child])]
                        if field in ("handlers", "cases")
                        else children
                    )


def loads(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """What importing module ``name`` runs itself: (the library modules it imports, the
    top-level names of the other modules it imports)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    ours, others = set(), set()
    for node in run_at_import(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            # `from package import module` imports the module too.
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        for target in targets:
            if target.split(".")[0] in modules or target in modules:
                parts = target.split(".")
                ours |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(modules)
            else:
                others.add(target.split(".")[0])
    return ours, others - set(sys.stdlib_module_names)


def loaded_at_import(modules: dict[str, Path]) -> dict[str, dict[str, list[str]]]:
    """{module: {third-party top-level name: the chain of library modules that imports it}}:
    what importing each module loads, following the library modules it imports (and their
    packages' ``__init__``)."""
    direct = {name: loads(name, path, modules) for name, path in modules.items()}
    found = {}
    for start in modules:
        parts = start.split(".")
        chains = {".".join(parts[:i]): [] for i in range(1, len(parts))}
        chains[start] = []
        todo, seen, found[start] = list(chains), set(), {}
        while todo:
            name = todo.pop(0)
            if name in seen or name not in direct:
                continue
            seen.add(name)
            chain = [*chains[name], name]
            ours, others = direct[name]
            for other in sorted(others):
                found[start].setdefault(other, chain)
            for module in sorted(ours - seen):
                chains.setdefault(module, chain)
                todo.append(module)
    return found


def extras_of(module: str) -> tuple[str, ...]:
    return next(
        (
            extras
            for home, extras in HOMES.items()
            if module == home or module.startswith(home + ".")
        ),
        (),
    )


def extra_imports(modules: dict[str, Path]) -> list[str]:
    """Each module that, when imported, loads a package neither the core nor its own extras
    declare, with the chain of library modules through which it does."""
    problems = []
    for module, loaded in loaded_at_import(modules).items():
        own = extras_of(module)
        allowed = declared(("core", *own))
        for name, chain in sorted(loaded.items()):
            if name not in OURS and distribution(name) not in allowed:
                via = " -> ".join(chain)
                problems.append(f"{module} ({'+'.join(own) or 'core'}) loads {name} via {via}")
    return problems


# ------------------------------------------------------------------ the library


def test_the_library_imports_only_its_core_and_extra_dependencies():
    imports = third_party(python_files(SRC))
    assert undeclared(imports, declared(("core", *FEATURES))) == []


def test_no_module_loads_an_extra_it_does_not_belong_to_when_imported():
    """A core module imports its extras' packages inside functions; importing it (and every
    library module it imports in turn) loads only the core's dependencies."""
    modules = library_modules()
    loaded = loaded_at_import(modules)
    # What the scan sees: the plot extra's own import, and the core a module loads through
    # the modules it imports; none through the package's __init__, which is lazy (issue 63:
    # `jaxes --version` imports no JAX).
    assert loaded["jaxes.plotting"]["matplotlib"] == ["jaxes.plotting"]
    assert {"jax", "numpy"} <= set(loaded["jaxes.app.parser"])
    assert loaded["jaxes"] == loaded["jaxes.app.cli"] == {}
    assert extra_imports(modules) == []


def test_the_check_catches_a_top_level_extra_import_direct_or_through_a_module(tmp_path):
    package = tmp_path / "jaxes"
    (package / "tasks" / "brax").mkdir(parents=True)
    files = {
        "__init__.py": "import os\nfrom jaxes import core\n",
        "core.py": "import numpy\n\ndef lazy():\n    import brax\n",
        "eager.py": "import jax\ntry:\n    import wandb\nexcept ImportError:\n    pass\n",
        "plotting.py": "from matplotlib.axes import Axes\n",
        "report.py": "from jaxes import plotting\n",
        "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import brax\n",
        "tasks/__init__.py": "",
        "tasks/brax/__init__.py": "import brax\nfrom jaxes.tasks.brax import envs\n",
        "tasks/brax/envs.py": "from .. import brax as _self\nimport mujoco\n",
        "tasks/sample.py": "class Task:\n    import gymnax\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    assert extra_imports(library_modules(tmp_path)) == [
        "jaxes.eager (core) loads wandb via jaxes.eager",
        "jaxes.report (core) loads matplotlib via jaxes.report -> jaxes.plotting",
        "jaxes.tasks.sample (core) loads gymnax via jaxes.tasks.sample",
    ]


def test_every_feature_extra_belongs_to_modules_of_the_library():
    """``HOMES`` names a module for each of pyproject.toml's feature extras, and each exists."""
    modules = library_modules()
    assert sorted({e for extras in HOMES.values() for e in extras}) == list(FEATURES)
    assert all(home in modules for home in HOMES), set(HOMES) - set(modules)


def test_every_extra_of_the_library_is_one_require_knows():
    """``jaxes.extras.MODULES`` names each optional feature's modules for the one-line error:
    an extra pyproject.toml has and it lacks gives ``require`` a ValueError instead, and a
    package of the extra it does not name is reported as a crash, not as the missing extra."""
    from jaxes.extras import MODULES

    assert set(MODULES) == set(FEATURES)
    for extra in FEATURES:
        assert declared((extra,)) <= {distribution(m) for m in MODULES[extra]}, extra


def test_an_extra_that_names_other_extras_of_jaxes_declares_theirs():
    """``dev`` lists ``jaxes[tensorboard,wandb,mlflow,llm]``: the suite's venv has the
    trackers, and tests/test_loggers.py may import them; jaxes-examples's ``jaxes[llm]``."""
    assert {"wandb", "mlflow-skinny", "tensorboardx", "safetensors"} <= declared(("dev",))
    assert not {"wandb", "mlflow-skinny"} & declared(("plot",))
    assert {"jax", "safetensors", "scikit-learn"} <= declared(("core",), EXAMPLES)
    assert "brax" not in declared(("core",), EXAMPLES)


# ------------------------------------------------------------------ tests, examples, notebooks


@pytest.mark.parametrize("folder", ["tests", "examples"])
def test_tests_and_examples_import_only_what_make_test_installs(folder):
    # Files of the repository that tests put on sys.path (benchmarks/table3.py, tests/helpers.py,
    # docs/api_modules.py).
    folders = ("tests", "examples", "benchmarks", "docs")
    local = {p.stem for d in folders for p in (ROOT / d).glob("*.py")}
    allowed = declared(("core", *TESTED_EXTRAS)) | declared(("core",), EXAMPLES)
    assert undeclared(third_party(python_files(ROOT / folder), local), allowed) == []


def test_the_examples_package_imports_only_what_its_pyproject_declares():
    """jaxes-examples requires ``jaxes[llm]`` and scikit-learn (examples/pyproject.toml): an
    import of anything else fails on a hosted notebook's install."""
    imports = third_party(python_files(ROOT / "examples" / "jaxes_examples"))
    allowed = declared(("core",), EXAMPLES)
    assert "scikit-learn" in allowed
    assert undeclared(imports, allowed) == []


def test_notebooks_import_only_declared_packages():
    """Each notebook's imports come from the standard library, jaxes (its core or an extra)
    or jaxes-examples: a hosted notebook installs them by those names."""
    allowed = declared(("core", *JAXES["optional-dependencies"])) | declared(("core",), EXAMPLES)
    codes = {p.name: notebook_code(p) for p in sorted(NOTEBOOKS.glob("*.ipynb"))}
    assert len(codes) >= 12 and all(OURS & imported(c) for c in codes.values())
    imports = third_party(codes)
    assert {"matplotlib", "gymnax", "IPython"} <= set(imports)  # every cell was read
    assert undeclared(imports, allowed) == []


def test_the_check_catches_an_undeclared_import():
    source = "import numpy\n%matplotlib inline\n!pip install pandas\nimport pytest\n"
    imports = {m: {"probe.ipynb"} for m in imported(without_magics(source))}
    assert undeclared(imports, declared(("core",))) == [
        "pytest (distribution pytest) imported by probe.ipynb"
    ]
    sklearn = third_party({"probe.py": "from sklearn import datasets\nimport yaml\n"})
    assert undeclared(sklearn, declared(("core",), EXAMPLES)) == [
        "yaml (distribution pyyaml) imported by probe.py"
    ]
