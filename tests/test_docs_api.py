"""The docs name only what the code has, and the API reference covers the whole API.

Inline code (README.md, docs/*.md): each inline code span (outside fenced blocks) that starts
with a jaxes module (`jaxes.noise.table_size`, `train.load_policy`, `centroid.masses`) must
resolve; a bare call (`brax_task(env_name, ...)`) is looked up in the modules its section and
its paragraph name, and where it resolves, each argument the docs give must be a parameter.

The API reference (docs/api.md, built by `make docs`): its pages are generated from the
docstrings (docs/conf.py writes one per module, docs/api_modules.py says what each holds), and
docs/api.md lists them. Checked here without building the site: every public module has a
page in api.md's toctrees and nothing else does; api.md's tables hold every name
``jaxes.__all__`` exports, each resolving; every page describes or links each name its module
exports, and each link lands on a page that describes it. A tiny site built with make docs's
flags and the docs' settings fails on a docstring that does not parse and on a broken
cross-reference, naming the file (`make docs` itself runs in CI, after `make test`).
"""

import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import jaxes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
from api_modules import page_names, public_modules  # noqa: E402

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


# ------------------------------------------------------------------ the API reference

API = ROOT / "docs" / "api.md"
TOCTREE = re.compile(r"^```\{toctree\}\n(.*?)^```", re.M | re.S)
AUTOSUMMARY = re.compile(r"^\.\. autosummary::\n(.*?)(?=^```|\Z)", re.M | re.S)


def listed_modules(text: str) -> list[str]:
    """The modules whose pages docs/api.md's toctrees list (``_api/jaxes.noise``)."""
    entries = [line.strip() for block in TOCTREE.findall(text) for line in block.splitlines()]
    return [e.removeprefix("_api/") for e in entries if e.startswith("_api/")]


def summarised(text: str) -> list[str]:
    """The full names in docs/api.md's autosummary tables (``~jaxes.shaping.raw``)."""
    lines = [line.strip() for block in AUTOSUMMARY.findall(text) for line in block.splitlines()]
    return [line.lstrip("~") for line in lines if line and not line.startswith(":")]


def resolve(name: str):
    """The object a full dotted name names, importing its longest module prefix (so that
    ``jaxes.strategies.snes.snes`` is the function in the module, not the package's)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def reference_problems(text: str, public: list[str]) -> list[str]:
    problems = []
    listed = listed_modules(text)
    problems += [f"no page for public module {m}" for m in public if m not in listed]
    problems += [f"a page for {m}, not a public module" for m in listed if m not in public]
    problems += [f"{m} listed twice" for m in sorted(set(listed)) if listed.count(m) > 1]
    found = []
    for name in summarised(text):
        try:
            found.append(resolve(name))
        except (ImportError, AttributeError):
            problems.append(f"{name} does not import")
    for name in jaxes.__all__:
        if not any(obj is getattr(jaxes, name) for obj in found):
            problems.append(f"jaxes.{name} is not in api.md's tables")
    return problems


def test_the_reference_has_a_page_for_each_public_module_and_every_name_jaxes_exports():
    assert reference_problems(API.read_text(), public_modules()) == []


def test_the_reference_checks_catch_a_missing_page_a_missing_name_and_a_wrong_one():
    text = API.read_text()
    assert "\n_api/jaxes.noise.budget\n" in text and "   ~jaxes.shaping.raw\n" in text
    planted = text.replace("\n_api/jaxes.noise.budget\n", "\n_api/jaxes.no_such_module\n")
    planted = planted.replace("   ~jaxes.shaping.raw\n", "   ~jaxes.shaping.no_such_name\n")
    assert reference_problems(planted, public_modules()) == [
        "no page for public module jaxes.noise.budget",
        "a page for jaxes.no_such_module, not a public module",
        "jaxes.shaping.no_such_name does not import",
        "jaxes.raw is not in api.md's tables",
    ]


def page_problems(public: list[str]) -> list[str]:
    """Names a module exports that its page neither describes nor links, and links to a page
    that does not describe the name."""
    pages = {m: page_names(m, public) for m in public}
    problems = []
    for module, (here, elsewhere) in pages.items():
        exported = getattr(importlib.import_module(module), "__all__", None)
        if exported is None:
            continue
        linked = {target.rsplit(".", 1)[1]: target for target in elsewhere}
        for name in exported:
            obj = getattr(importlib.import_module(module), name)
            if inspect.ismodule(obj) or name in here:
                continue
            target = linked.get(getattr(obj, "__name__", name))
            if target is None:
                problems.append(f"{module}.{name}: neither described nor linked")
                continue
            home, home_name = target.rsplit(".", 1)
            described = pages[home][0]
            if described is not None and home_name not in described:
                problems.append(f"{module}.{name}: linked to {target}, not described there")
    return problems


def test_each_page_describes_or_links_what_its_module_exports():
    public = public_modules()
    assert page_problems(public) == []
    here, elsewhere = page_names("jaxes", public)
    assert here == [] and "jaxes.strategies.open_es.open_es" in elsewhere
    assert len(elsewhere) == len(jaxes.__all__)


# ------------------------------------------------------------------ bad input fails the build


def docs_flags() -> list[str]:
    """make docs's sphinx-build flags (the Makefile's DOCS_FLAGS)."""
    match = re.search(r"^DOCS_FLAGS := (.*)$", (ROOT / "Makefile").read_text(), re.M)
    return match.group(1).split()


TINY_CONF = """
import sys
from pathlib import Path

sys.path.insert(0, {here!r})
real = Path({conf!r})
settings = {{"__file__": str(real)}}
exec(compile(real.read_text(), str(real), "exec"), settings)
globals().update({{k: v for k, v in settings.items() if k in KEPT}})
root_doc = "index"
include_patterns = ["**"]
exclude_patterns = ["_build"]
"""
# The settings that decide what a warning is, taken from docs/conf.py itself.
KEPT = (
    "extensions",
    "nitpicky",
    "nitpick_ignore",
    "nitpick_ignore_regex",
    "suppress_warnings",
    "napoleon_google_docstring",
    "napoleon_numpy_docstring",
    "myst_enable_extensions",
    "myst_heading_anchors",
    "nb_execution_mode",
)


def build_tiny_site(tmp_path: Path, docstring: str, page: str) -> subprocess.CompletedProcess:
    tmp_path.mkdir()
    (tmp_path / "tiny_module.py").write_text(f'def probe():\n    """{docstring}"""\n')
    (tmp_path / "index.md").write_text(
        f"# Tiny\n\n{page}\n\n```{{eval-rst}}\n.. autofunction:: tiny_module.probe\n```\n"
    )
    conf = TINY_CONF.format(here=str(tmp_path), conf=str(ROOT / "docs" / "conf.py"))
    (tmp_path / "conf.py").write_text(f"KEPT = {KEPT!r}\n" + conf)
    # --no-color: CI sets FORCE_COLOR, and a coloured line starts with an escape, not the file.
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "--no-color", *docs_flags()]
    return subprocess.run(
        [*command, str(tmp_path), str(tmp_path / "_build")],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_make_docs_fails_on_a_broken_docstring_or_reference_and_names_the_file(tmp_path):
    pytest.importorskip("sphinx")
    assert {"-W", "-n", "--keep-going"} <= set(docs_flags())
    ok = build_tiny_site(tmp_path / "ok", "Fine: ``x``.\n\n    Args:\n      x: a number.\n", "")
    assert ok.returncode == 0, ok.stderr
    broken = build_tiny_site(
        tmp_path / "broken",
        "Unclosed: ``x.\n\n    Args:\n      x: see :func:`no_such_function`.\n",
        "[a missing page](missing.md)",
    )
    assert broken.returncode != 0
    lines = broken.stderr.splitlines()
    module = str(tmp_path / "broken" / "tiny_module.py")
    page = str(tmp_path / "broken" / "index.md")

    def named(path, words):
        return any(line.startswith(path) and words in line for line in lines)

    assert named(module, "Inline literal start-string"), lines  # the docstring does not parse
    assert named(module, "no_such_function"), lines  # a reference to nothing
    assert named(page, "missing.md"), lines  # a link to a page that is not there
