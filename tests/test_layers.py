"""The layer rule of docs/architecture.md, executable: no module imports one above it or beside it.

The import graph is read from the source (AST), not by importing. Each module belongs to the
first room whose prefix it starts with; rooms are listed top (the app) to bottom (foundation).
A module may import its own room and any room below; a room beside it (tasks and strategies
are both in the "search" layer) or above it is a violation. Alias modules (old import paths
that replace themselves in ``sys.modules``) are skipped: they import their target only.
"""

import ast
import importlib.util
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# (layer, rooms in it), top to bottom. A room is a module or package prefix, or a tuple of
# them that may import each other freely.
LAYERS = [
    ("facade", ["jaxes"]),
    ("app", [("jaxes.app", "jaxes.__main__")]),
    ("training", ["jaxes.training"]),
    ("devices", ["jaxes.parallel"]),
    ("generation", ["jaxes.step"]),
    ("models", ["jaxes.llm"]),
    (
        "search",
        [
            "jaxes.strategies",
            "jaxes.tasks",
            "jaxes.subspace",
            "jaxes.diagnostics",
            "jaxes.testing",
            "jaxes.plotting",
        ],
    ),
    # jaxes.factored (the big-model wing) spans three layers: its LowRank type and the ordering
    # tie are foundation, its noise source sits with jaxes.noise, the rest is members. The old
    # paths (shims that warn, jaxes._moved) stay in the layers of what they name.
    ("members", [("jaxes.factored", "jaxes.layer_terms", "jaxes.quantized")]),
    (
        "core",
        [
            ("jaxes.noise", "jaxes.factored.noise"),
            "jaxes.shaping",
            "jaxes.optim",
            "jaxes.evaluation",
            "jaxes.collectives",
        ],
    ),
    ("algebra", ["jaxes.centroid"]),
    (
        "foundation",
        [
            (
                "jaxes.types",
                "jaxes.trees",
                "jaxes.factored.lowrank",
                "jaxes.factored.ordering",
                "jaxes.low_rank",
                "jaxes.ordering",
                "jaxes._moved",
                "jaxes.checks",
                "jaxes.compat",
                "jaxes.extras",
            )
        ],
    ),
]


def module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """The jaxes modules a file imports (``from jaxes import noise`` imports jaxes.noise)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "jaxes"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "jaxes":
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in modules else base)
    return found


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    files = {module_name(p, src): p for p in (src / "jaxes").rglob("*.py")}
    return {name: imports_of(path, name, set(files)) for name, path in files.items()}


def room_of(module: str, layers=LAYERS) -> tuple[int, tuple[str, ...]]:
    """(layer index, room) of the longest prefix that names the module."""
    best, longest = None, -1
    for index, (_, rooms) in enumerate(layers):
        for room in rooms:
            room = room if isinstance(room, tuple) else (room,)
            for prefix in room:
                if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > longest:
                    best, longest = (index, room), len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer of tests/test_layers.py: add it")
    return best


def violations(graph: dict[str, set[str]], layers=LAYERS) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        layer, room = room_of(module, layers)
        for target in sorted(targets):
            target_layer, target_room = room_of(target, layers)
            if target_layer < layer or (target_layer == layer and target_room != room):
                found.append(
                    f"{module} ({layers[layer][0]}) imports {target} ({layers[target_layer][0]})"
                )
    return found


def test_no_module_imports_a_layer_above_or_beside_it():
    assert violations(import_graph()) == []


def test_every_module_has_a_layer():
    for module in import_graph():
        room_of(module)


def test_a_wrong_import_is_caught():
    graph = {
        "jaxes.noise.sources": {"jaxes.trees"},  # down: fine
        "jaxes.strategies.open_es": {"jaxes.noise.sources", "jaxes.strategies.base"},
        "jaxes.tasks.brax.render": {"jaxes.strategies"},  # beside: wrong
        "jaxes.centroid": {"jaxes.training.rundir"},  # up: wrong
    }
    assert violations(graph) == [
        "jaxes.centroid (algebra) imports jaxes.training.rundir (training)",
        "jaxes.tasks.brax.render (search) imports jaxes.strategies (search)",
    ]


def test_the_reader_resolves_relative_and_from_imports(tmp_path):
    package = tmp_path / "jaxes" / "noise"
    package.mkdir(parents=True)
    (tmp_path / "jaxes" / "__init__.py").write_text("")
    (tmp_path / "jaxes" / "trees.py").write_text("")
    (package / "__init__.py").write_text("from jaxes.noise.keys import noise_key\n")
    (package / "keys.py").write_text("from .. import trees\nfrom jaxes import strategies\n")
    graph = import_graph(tmp_path)
    assert graph["jaxes.noise"] == {"jaxes.noise.keys"}
    assert graph["jaxes.noise.keys"] == {"jaxes.trees", "jaxes"}


ARCHITECTURE = SRC.parent / "docs" / "architecture.md"


def room_name(module: str) -> str:
    """The room a module is drawn in: its package below jaxes, or itself at the top level."""
    parts = module.split(".")
    return "jaxes" if len(parts) == 1 else parts[1]


def room_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, targets in graph.items():
        for target in targets:
            a, b = room_name(module), room_name(target)
            if a != b:
                edges.setdefault(a, set()).add(b)
    return edges


def documented_tables(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """(modules in the module table, the room-imports table) of docs/architecture.md."""
    modules, imports = set(), {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        name = cells[0].strip("`")
        if name.endswith(".py"):
            modules.add(name)
        elif not cells[1].startswith("`"):
            imports[name] = {room.strip() for room in cells[1].split(",")}
    return modules, imports


def test_architecture_names_every_module_and_every_import_between_rooms():
    graph = import_graph()
    files = {str(p.relative_to(SRC / "jaxes")) for p in (SRC / "jaxes").rglob("*.py")}
    re_exports = {f for f in files if f.endswith("/__init__.py")}  # listing them is optional
    modules, imports = documented_tables(ARCHITECTURE.read_text())
    assert files - re_exports - modules == set(), "modules docs/architecture.md leaves out"
    assert modules - files == set(), "modules docs/architecture.md names that do not exist"
    assert imports == room_imports(graph)


def test_every_module_holds_code_and_no_old_path_imports():
    """The 0.1.0 aliases (modules that replaced themselves in ``sys.modules``) are gone: one
    name per module."""
    aliases = [
        str(p.relative_to(SRC))
        for p in (SRC / "jaxes").rglob("*.py")
        if "sys.modules[__name__]" in p.read_text()
    ]
    assert aliases == []
    old = ["jaxes.runner", "jaxes.config", "jaxes.cli", "jaxes.lowrank", "jaxes.tasks.brax_envs"]
    assert [name for name in old if importlib.util.find_spec(name) is not None] == []


# Inside the strategy core (issue 58): each tier imports only tiers below it. The public base
# types and the tell machinery sit beside the tiers they serve; every strategy file is above
# the core.
STRATEGY_TIERS = [
    ("state", {"jaxes.strategies.state", "jaxes.strategies.base"}),
    ("settings", {"jaxes.strategies.settings", "jaxes.strategies._state"}),
    ("samplers", {"jaxes.strategies.samplers", "jaxes.strategies._tell"}),
    ("core", {"jaxes.strategies.core"}),
]


def strategy_tier(module: str) -> int:
    for index, (_, members) in enumerate(STRATEGY_TIERS):
        if module in members:
            return index
    return len(STRATEGY_TIERS)  # a strategy, its constants, termination, restarts


def strategy_tier_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        if not module.startswith("jaxes.strategies.") or strategy_tier(module) == len(
            STRATEGY_TIERS
        ):
            continue
        for target in sorted(targets):
            if target.startswith("jaxes.strategies") and strategy_tier(target) > strategy_tier(
                module
            ):
                found.append(f"{module} imports {target}, a tier above it")
    return found


def test_the_strategy_core_imports_only_down_its_tiers():
    """state -> settings -> samplers -> core -> strategies: no import up, so no circle."""
    graph = import_graph()
    tiers = {m for _, members in STRATEGY_TIERS for m in members}
    assert tiers <= set(graph), f"tiers name modules that do not exist: {tiers - set(graph)}"
    assert strategy_tier_violations(graph) == []
    wrong = {"jaxes.strategies.samplers": {"jaxes.strategies.core"}}
    assert strategy_tier_violations(wrong) == [
        "jaxes.strategies.samplers imports jaxes.strategies.core, a tier above it"
    ]
