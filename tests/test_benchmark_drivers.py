"""Every script in benchmarks/ runs on the shared driver (benchmarks/_driver.py, issue 63): its
command line from `driver.parser` and `driver.main` as its entry, so that each takes `--out`,
`--quick` and `--help` alike and a results page's command reads the same everywhere. Read from
the scripts' source (their AST): nothing is imported or run."""

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# Not measurements: a script here has a reason to stand apart, or it is on the driver.
APART = {"render.py": "draws the results pages from the JSONs the drivers write"}
SCRIPTS = sorted(
    p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_") and p.name not in APART
)


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """The calls of `driver.<name>(...)` in `tree`."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "driver"
    ]


def main_block(tree: ast.Module) -> ast.If | None:
    """The module's `if __name__ == "__main__":` block."""
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "__name__ == '__main__'",
            "'__main__' == __name__",
        ):
            return node
    return None


def test_the_helpers_and_the_scripts_are_where_the_test_looks():
    assert (BENCHMARKS / "_driver.py").exists()
    assert len(SCRIPTS) > 20
    assert all((BENCHMARKS / name).exists() for name in APART)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_script_runs_on_the_shared_driver(script):
    tree = ast.parse(script.read_text())
    imported = {
        (alias.name, alias.asname)
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert ("_driver", "driver") in imported, "import _driver as driver"
    assert calls(tree, "parser"), "its command line from driver.parser(__doc__, ...)"
    block = main_block(tree)
    assert block is not None, 'no `if __name__ == "__main__":` block'
    entry = calls(block, "main")
    assert entry, "its entry is driver.main(sys.argv, parse_args, run_child, run)"
    assert ast.unparse(entry[0].args[0]) == "sys.argv"
