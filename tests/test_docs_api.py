"""The docs name only what the code has: each `jaxes...` name imports, each keyword exists.

Reads inline code spans (outside fenced blocks) of README.md and docs/*.md. A span that starts
with a jaxes module (`jaxes.noise.table_size`, `train.load_policy`, `centroid.masses`) must
resolve; a bare call (`brax_task(env_name, ...)`) is looked up in the modules its section and
its paragraph name, and where it resolves, each argument the docs give must be a parameter.
"""

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import jaxes

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SPAN = re.compile(r"`([^`]+)`")  # a code span may wrap over lines
DOTTED = re.compile(r"^[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _modules() -> dict[str, str]:
    """Every jaxes module by its full name and, where unambiguous, by its last part."""
    full = {"jaxes": "jaxes"}
    for info in pkgutil.walk_packages(jaxes.__path__, "jaxes."):
        full[info.name] = info.name
    short: dict[str, list[str]] = {}
    for name in full:
        short.setdefault(name.rsplit(".", 1)[-1], []).append(name)
    for last, names in short.items():
        top = f"jaxes.{last}"
        if top in full or len(names) == 1:
            full.setdefault(last, top if top in full else names[0])
    return full


MODULES = _modules()


def _resolve(dotted: str):
    """(found, object) for a dotted name whose head is a jaxes module; None if it is not one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in MODULES:
            obj = importlib.import_module(MODULES[head])
            for attr in parts[cut:]:
                if not hasattr(obj, attr):
                    return False, None
                obj = getattr(obj, attr)
            return True, obj
    return None


def _arguments(text: str) -> list[str]:
    """The names a documented call gives: `(a, b=1, *, c, fn(x))` -> [a, b, c, fn]."""
    tokens, token, depth = [], "", 0
    for ch in text[1:]:
        if depth == 0 and ch in ",)":
            tokens.append(token)
            token = ""
            if ch == ")":
                break
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            token += ch
    names = []
    for token in tokens:
        name = DOTTED.match(token.split("=")[0].strip().lstrip("*"))
        if name and "." not in name.group(0):
            names.append(name.group(0))
    return names


def _check_call(obj, args: list[str]) -> list[str]:
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    return [a for a in args if a not in params]


def _paragraphs(path: Path):
    """(section modules, paragraph text) pairs, fenced code removed."""
    text = FENCE.sub("", path.read_text())
    section: list[str] = []
    for block in re.split(r"\n\s*\n|\n(?=[*-] |\|)", text):
        if block.lstrip().startswith("#"):
            section = [s for s in _spans(block) if s in MODULES]
        yield section, block


LISTING = re.compile(r"^\s*(?:[*-]\s+)?`(jaxes[\w.]*)`:")


def _lookup(span: str, name: str, context: list[str], listing: str | None):
    """(found, object) for a span's name; None where it is not a jaxes name (prose, a method)."""
    if "." in name:
        return _resolve(name)
    for module in context:
        candidate = _resolve(f"{module}.{name}")
        if candidate and candidate[0]:
            return candidate
    if listing and span == name and name not in MODULES:
        return False, None  # a listing of `jaxes.x`'s names: each must be there
    return None


def _spans(block: str) -> list[str]:
    return [" ".join(span.split()) for span in SPAN.findall(block)]


def _problems(path: Path) -> list[str]:
    problems = []
    for section, block in _paragraphs(path):
        match = LISTING.match(block)
        listing = match.group(1) if match and match.group(1) in MODULES else None
        named = [s for s in _spans(block) if s in MODULES and "." in s]
        context = ([listing] if listing else []) + named + section
        for span in _spans(block):
            head = DOTTED.match(span)
            if not head or span.endswith((".py", ".md")) or "/" in span:
                continue
            name = head.group(0)
            resolved = _lookup(span, name, context, listing)
            if resolved is None:
                continue
            found, obj = resolved
            if not found:
                problems.append(f"{path.name}: `{span}`: {name} does not import")
                continue
            rest = span[len(name) :]
            args = _arguments(rest) if rest.startswith("(") else []
            if args and callable(obj):
                missing = _check_call(obj, args)
                if missing:
                    problems.append(f"{path.name}: `{span}`: no parameter {missing} in {name}")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_documented_name_imports_and_every_keyword_exists(path):
    assert _problems(path) == []


def test_the_reader_catches_a_wrong_module_a_missing_name_and_a_wrong_keyword(tmp_path):
    doc = tmp_path / "api.md"
    doc.write_text(
        "## Centroid (`jaxes.centroid`)\n\n"
        "`displacement_update(m, sigma)` and `masses(weights)` are right;\n"
        "`displacement_update(moments, sigma)` names a keyword it lacks.\n\n"
        "* `jaxes.tasks.functions`: `function_task(fn, dim, start)`, `jaxes.noise.no_such_thing`.\n"
        "* `train.generation_step` lives elsewhere.\n"
        "* `jaxes.tasks.functions`: `sphere`, `no_such_function`.\n"
    )
    found = _problems(doc)
    assert len(found) == 4, found
    assert "['moments']" in found[0]
    assert "no_such_thing" in found[1]
    assert "train.generation_step" in found[2]
    assert "no_such_function" in found[3]
