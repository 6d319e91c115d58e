"""benchmarks/regimes.py --parts (issue 63: benchmarks/call_parts.py folded in): its command
line, the one child it plans and the tables it prints. Nothing is compiled or timed."""

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the script imports `_common` as a sibling

import regimes  # noqa: E402


def test_parts_plans_one_child_at_snes_d_10_p_16_by_default():
    args = regimes.parse_args(["--parts"])
    assert args.out.name == "regimes_parts.json"
    (spec,) = regimes.plan(args)
    assert spec == {"kind": "parts", "strategy": "snes", "d": 10, "P": 16} | {
        "counts": regimes.PARTS_COUNTS
    }


def test_parts_takes_the_first_of_the_grid_options_and_quick_counts():
    argv = ["--parts", "--quick", "--strategies", "open_es", "snes", "--dims", "100", "--pops"]
    args = regimes.parse_args([*argv, "64", "16"])
    assert args.out.name == "regimes_parts_quick.json"
    (spec,) = regimes.plan(args)
    assert (spec["strategy"], spec["d"], spec["P"]) == ("open_es", 100, 64)
    assert spec["counts"] == regimes.QUICK_PARTS_COUNTS


def test_without_parts_the_grid_is_planned():
    args = regimes.parse_args(["--quick"])
    assert args.out.name == "regimes_quick.json"
    assert {spec["kind"] for spec in regimes.plan(args)} == {"cell", "init", "seeds"}


def test_the_parts_tables():
    libs = ("jaxes", "evosax")
    parts = {"strategy": "snes", "d": 10, "P": 16}
    parts["tell_program"] = {lib: {"kernels": 30, "outputs": 20, "state_leaves": 9} for lib in libs}
    calls = {"ask": 100.0, "tell": 120.0, "state round trip": 30.0}
    parts |= {"calls": dict.fromkeys(libs, calls), "calls_donated": dict.fromkeys(libs, calls)}
    parts["generations"] = dict.fromkeys(libs, {"info": 250.0, "state only": 230.0})
    parts["generation_step"] = {"metrics": 170.0, "no metrics": 150.0}
    text = regimes.format_parts(parts)
    assert text.startswith("snes, d = 10, P = 16: a jitted tell's top-level kernels jaxes 30")
    assert "| tell | 120.0 | 120.0 | 120.0 | 120.0 |" in text
    assert "| state only | 230.0 | 230.0 |" in text
    assert "| no metrics | 150.0 |" in text


def test_a_failed_parts_child_is_one_line():
    failed = {"kind": "parts", "status": "error", "error": "exit code 1: Traceback ..."}
    assert regimes.format_parts(failed) == "parts: error: exit code 1: Traceback ..."
