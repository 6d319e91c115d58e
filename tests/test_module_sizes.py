"""The package stays readable: no module in src/ over 400 lines, and no function over 60 lines
outside its docstring unless a comment in it says why ("Longer than 60 lines because ...").
Read from the source (ast); nothing is imported."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "jaxes"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60
WHY = "Longer than 60 lines because"


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    value = getattr(first, "value", None)
    docstring = isinstance(value, ast.Constant) and isinstance(value.value, str)
    start = first.end_lineno + 1 if docstring else first.lineno
    return node.end_lineno - start + 1


def long_functions(source: str) -> list[tuple[str, int]]:
    """``(name, lines)`` of each function over the limit without a sentence saying why."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            n = _body_lines(node)
            text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            if n > MAX_FUNCTION_LINES and WHY not in text:
                found.append((node.name, n))
    return found


def test_no_module_is_over_400_lines_and_no_function_over_60_without_a_reason():
    big, long = [], []
    for path in sorted(SRC.rglob("*.py")):
        source = path.read_text()
        if source.count("\n") > MAX_MODULE_LINES:
            big.append(f"{path.relative_to(SRC)}: {source.count(chr(10))} lines")
        long += [f"{path.relative_to(SRC)}: {name} {n}" for name, n in long_functions(source)]
    assert big == [] and long == []


def test_the_reader_counts_a_long_function_and_accepts_a_reason():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    source = f'def f():\n    """Doc."""\n{body}\n'
    assert long_functions(source) == [("f", 61)]
    assert long_functions(source.replace('"""Doc."""', f'"""Doc."""\n    # {WHY} ...')) == []
    assert long_functions('def g():\n    """A long\n    docstring."""\n    return 1\n') == []


# Issue 62's strategies, each one file of maths on the strategy core (its target: <= 200 lines).
NEW_STRATEGIES = ("ma_es", "lm_ma_es", "cr_fm_nes", "pes", "nres", "guided_es", "ga", "lineage")
MAX_STRATEGY_LINES = 200


def test_each_strategy_added_on_the_core_is_one_file_of_at_most_200_lines():
    sizes = {
        name: (SRC / "strategies" / f"{name}.py").read_text().count("\n") for name in NEW_STRATEGIES
    }
    assert {name: n for name, n in sizes.items() if n > MAX_STRATEGY_LINES} == {}
