"""Every third-party module the code imports comes from a dependency pyproject.toml declares.

A venv that once held a package keeps it, so a test that imports an undeclared one passes on the
developer's machine and fails on CI's clean one (chex did: tests imported it, nothing declared it).
The imports are read from the source (AST); the declared set is the installed metadata of jaxes
and of jaxes-examples (examples/pyproject.toml), so `make test`'s editable installs answer for the
working tree's two pyproject.toml files.
"""

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The extras `make test` installs; benchmarks/ also need `bench`, which the suite does not install.
TESTED_EXTRAS = ("brax", "gymnax", "plot", "dev")
# The two distributions of this repository: the library and the examples' package.
OURS = {"jaxes", "jaxes_examples"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(extras: tuple[str, ...], distribution: str = "jaxes") -> set[str]:
    """A distribution's requirements (canonical names) for the core and the given extras, not
    transitive, except that an extra naming the distribution's own extras (``dev`` asks for
    ``jaxes[tensorboard,wandb,mlflow]``) brings theirs in."""
    names = set()
    for line in metadata.requires(distribution) or []:
        spec, _, marker = line.partition(";")
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if extra is not None and extra.group(1) not in extras:
            continue
        requirement = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", spec)
        name = canonical(requirement.group(1))
        wanted = tuple(e.strip() for e in (requirement.group(2) or "").split(",") if e.strip())
        if name == canonical(distribution):
            if set(wanted) - set(extras):
                names |= declared(tuple(set(extras) | set(wanted)), distribution)
        else:
            names.add(name)
    return names


def top_level_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def third_party(paths: list[Path], local: set[str]) -> dict[str, set[str]]:
    """{top-level module: files importing it}, less the standard library, ours and local files."""
    out: dict[str, set[str]] = {}
    for path in paths:
        for mod in top_level_imports(path) - set(sys.stdlib_module_names) - local - OURS:
            out.setdefault(mod, set()).add(str(path.relative_to(ROOT)))
    return out


def undeclared(imports: dict[str, set[str]], allowed: set[str]) -> list[str]:
    dists = metadata.packages_distributions()
    problems = []
    for mod, files in sorted(imports.items()):
        providers = {canonical(d) for d in dists.get(mod, [])}
        if not providers & allowed:
            where = ", ".join(sorted(files)[:3])
            got = ", ".join(sorted(providers)) or "no installed distribution"
            problems.append(f"{mod} (from {got}) imported by {where}")
    return problems


def test_the_library_imports_only_its_core_and_extra_dependencies():
    paths = sorted((ROOT / "src").rglob("*.py"))
    every_extra = tuple(metadata.metadata("jaxes").get_all("Provides-Extra") or [])
    assert undeclared(third_party(paths, set()), declared(every_extra)) == []


@pytest.mark.parametrize("folder", ["tests", "examples"])
def test_tests_and_examples_import_only_what_make_test_installs(folder):
    # tests/fixtures/*/make_*.py make the fixtures in a venv of their own (transformers and
    # PyTorch, which make test never installs), and no test imports them.
    paths = [p for p in sorted((ROOT / folder).rglob("*.py")) if "fixtures" not in p.parts]
    # Files of the repository that tests put on sys.path (benchmarks/table3.py, tests/helpers.py).
    local = {p.stem for d in ("tests", "examples", "benchmarks") for p in (ROOT / d).glob("*.py")}
    allowed = declared(TESTED_EXTRAS) | declared((), "jaxes-examples")
    assert undeclared(third_party(paths, local), allowed) == []


def test_the_examples_package_imports_only_jaxes_core_and_its_own_dependencies():
    """jaxes-examples requires plain ``jaxes`` (no extra) and what examples/pyproject.toml
    names (scikit-learn): an import of anything else fails on a hosted notebook's install."""
    paths = sorted((ROOT / "examples" / "jaxes_examples").rglob("*.py"))
    allowed = declared(()) | declared((), "jaxes-examples")
    assert "scikit-learn" in allowed
    assert undeclared(third_party(paths, set()), allowed) == []


def test_an_extra_that_names_other_extras_of_jaxes_declares_theirs():
    """``dev`` lists ``jaxes[tensorboard,wandb,mlflow]``: the suite's venv has the trackers, and
    tests/test_loggers.py may import them."""
    assert {"wandb", "mlflow-skinny", "tensorboardx"} <= declared(("dev",))
    assert not {"wandb", "mlflow-skinny"} & declared(("plot",))


def test_the_check_catches_an_undeclared_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import numpy\nimport pytest\n")
    imports = {m: {"tests/probe.py"} for m in top_level_imports(probe)}
    assert undeclared(imports, declared(())) == ["pytest (from pytest) imported by tests/probe.py"]


def test_every_extra_of_the_library_is_one_require_knows():
    """``jaxes.extras.MODULES`` names each optional feature's modules for the one-line error;
    an extra in pyproject.toml it lacks gives ``require`` a ValueError instead."""
    from jaxes.extras import MODULES

    provided = set(metadata.metadata("jaxes").get_all("Provides-Extra") or [])
    assert set(MODULES) == provided - {"dev", "bench"}
