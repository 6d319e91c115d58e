"""The skeleton every benchmark driver shares, so that a driver holds only its measurement:
its command line (`parser`, `parse_count`, `comma_list`), its `main` (a child or the parent),
memory measurements and the markdown table it prints.

A driver reads (`run_child` is its measurement, in a child process: `_children.py`):

    import _driver as driver

    def parse_args(argv):
        parser = driver.parser(__doc__, "tiny sizes (smoke run)", "name", timeout=1800)
        ...                                   # the driver's own options
        args = parser.parse_args(argv)
        args.out = args.out or driver.results_path("name", args.quick)
        return args

    def run(args, argv):                      # the parent: spawn children, tabulate, and
        ...                                   # `_common.write_results`

    if __name__ == "__main__":
        driver.main(sys.argv, parse_args, run_child, run)

Nothing here imports JAX at import time.
"""

from __future__ import annotations

import argparse
import json
import resource
from collections.abc import Callable
from pathlib import Path

from _children import print_result
from _common import RESULTS

SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9}
MAX_OTHER_CPU_SHARE = 0.05  # warn when other processes took more of the CPU than this


# --------------------------------------------------------------------------------------------
# The command line.
# --------------------------------------------------------------------------------------------


def parser(
    doc: str,
    quick: str | None = None,
    results: str | None = None,
    timeout: float | None = None,
    out: bool = True,
    child: bool = True,
) -> argparse.ArgumentParser:
    """An argument parser described by the first line of `doc`, with the options drivers
    share: `--quick` (with `quick` as its help; None: no such option), `--out` (a Path; its
    help names `results_path(results)` as the default), `--timeout` (seconds per child,
    default `timeout`; None: no such option) and the hidden `--child` (a child's spec)."""
    result = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    if quick is not None:
        result.add_argument("--quick", action="store_true", help=quick)
    if out:
        what = "JSON results path"
        if results:
            also = f", or {results}_quick.json" if quick else ""
            what += f" (default: benchmarks/results/{results}.json{also})"
        result.add_argument("--out", type=Path, help=what)
    if timeout is not None:
        result.add_argument("--timeout", type=float, default=timeout, help="seconds per child")
    if child:
        result.add_argument("--child", help=argparse.SUPPRESS)
    return result


def results_path(name: str, quick: bool = False) -> Path:
    """Where a driver writes its JSON by default: benchmarks/results/<name>.json, or
    <name>_quick.json for a `--quick` run."""
    return RESULTS / f"{name}{'_quick' if quick else ''}.json"


def parse_count(text: str, example: str = "100M") -> int:
    """A positive count as people write it: "100M" (K, M, B or G, any case), "100k", "1e5",
    "2.5M" or "1000"; an `argparse.ArgumentTypeError` (`example` in its message) otherwise."""
    name = text.strip()
    number, suffix = (name[:-1], name[-1].upper()) if name[-1:].isalpha() else (name, "")
    if suffix and suffix not in SUFFIXES:
        raise argparse.ArgumentTypeError(f"size {text!r}: unknown suffix (K, M, B)")
    try:
        n = int(float(number) * SUFFIXES.get(suffix, 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: expected e.g. {example}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"size {text!r}: must be positive")
    return n


def comma_list(parse: Callable[[str], object]) -> Callable[[str], list]:
    """An argparse `type` reading "a,b,c" as [parse("a"), parse("b"), parse("c")]."""
    return lambda text: [parse(x) for x in text.split(",")]


def main(
    argv: list[str],
    parse_args: Callable[[list[str]], argparse.Namespace],
    run_child: Callable[[dict], dict] | None,
    run: Callable[[argparse.Namespace, list[str]], None],
) -> None:
    """A driver's `main`: `parse_args(argv[1:])`; with `--child SPEC` (a process that
    `_children.spawn` started) prints `run_child(spec)` for the parent to read, otherwise
    runs the parent, `run(args, argv)`."""
    args = parse_args(argv[1:])
    if run_child is not None and args.child:
        print_result(run_child(json.loads(args.child)))
        return
    run(args, argv)


# --------------------------------------------------------------------------------------------
# Memory.
# --------------------------------------------------------------------------------------------


def peak_rss_mib() -> float:
    """This process's peak resident memory (`ru_maxrss`) in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def mem_available_bytes() -> int:
    """The machine's MemAvailable (/proc/meminfo) in bytes, 0 where it is not given."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def memory_plan(compiled) -> dict:
    """XLA's memory plan of a compiled program (`compiled.memory_analysis()`): its argument,
    output, temp and alias bytes, and the bytes live at once while it runs: "peak" is
    argument + temp + output (a donated argument counted twice: in and out), "peak minus
    alias" counts it once."""
    stats = compiled.memory_analysis()
    arg, out = stats.argument_size_in_bytes, stats.output_size_in_bytes
    temp, alias = stats.temp_size_in_bytes, stats.alias_size_in_bytes
    return {
        "argument_bytes": arg,
        "output_bytes": out,
        "temp_bytes": temp,
        "alias_bytes": alias,
        "peak_bytes": arg + temp + out,
        "peak_minus_alias_bytes": arg + temp + out - alias,
    }


# --------------------------------------------------------------------------------------------
# Reporting.
# --------------------------------------------------------------------------------------------


def markdown_table(head: str, align: str, rows: list[list[str | None]]) -> str:
    """A markdown table: the column names `head` ("a | b | c"), the alignment line (`align`:
    "l" or "r" per column) and a line per row. A cell is written " text "; a None cell is a
    blank " " (a row that has nothing more to say)."""
    marks = {"l": "---", "r": "---:"}
    lines = [f"| {head} |", "|" + "".join(marks[a] + "|" for a in align)]
    return "\n".join(lines + [_markdown_row(row) for row in rows])


def _markdown_row(cells: list[str | None]) -> str:
    return "|" + "".join(" |" if cell is None else f" {cell} |" for cell in cells)


def shared_cpu_warnings(rows: list[dict], limit: float = MAX_OTHER_CPU_SHARE) -> list[str]:
    """A warning for the results' header when other processes took more than `limit` of the
    machine's CPU during any of `rows` (their `other_cpu_share`)."""
    if any(row.get("other_cpu_share", 0.0) > limit for row in rows):
        return [f"other processes took > {limit:.0%} of the CPU during some runs (other_cpu_share)"]
    return []
