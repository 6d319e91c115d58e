"""Installing: how many packages each install of jaxes pulls, and how long `import jaxes` takes.

For each install, a fresh venv gets the wheel built from the working tree (or from a git
revision, `--rev`), with the locked versions as constraints (`-c requirements/locked.txt`,
so two revisions are compared on the same versions):

  bare     `pip install jaxes`
  brax     `pip install 'jaxes[brax]'`
  all      `pip install 'jaxes[brax,gymnax,plot]'` (every extra a user runs; until the digits
           extra moved to examples/pyproject.toml, `[brax,gymnax,plot,digits]`)

It counts the packages the venv holds beyond pip itself, and times `import jaxes; jaxes.open_es`
(the import is lazy: a name read is what loads JAX) in a fresh
process (the median of `--repeats`, after one warm-up import that fills the bytecode caches).

Run:
  .venv/bin/python benchmarks/install.py                # the working tree (~3 min)
  .venv/bin/python benchmarks/install.py --rev 965c076  # a revision: its own pyproject.toml
Results: benchmarks/results/install.json for the working tree; a `--rev` run is a comparison
for the docs, not the project's result, so it goes to build/install-rev.json unless `--out`
names a file (git keeps every committed result: `git show REV:benchmarks/results/install.json`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _driver as driver
from _common import REPO, machine_info, write_results

INSTALLS = {"bare": "", "brax": "[brax]", "all": "[brax,gymnax,plot]"}
# `import jaxes` is lazy (e434480): reading a name is what loads JAX and the strategies.
TIMER = (
    "import time; t = time.perf_counter(); import jaxes; jaxes.open_es; "
    "print(time.perf_counter() - t)"
)


def wheel(source: Path, into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(into), "."],
        cwd=source,
        check=True,
    )
    return next(into.glob("jaxes-*.whl"))


def source_of(rev: str | None, scratch: Path) -> Path:
    """The tree to build: the working tree, or ``rev`` exported from git."""
    if rev is None:
        return REPO
    tree = scratch / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def measure(built: Path, extras: str, scratch: Path, repeats: int) -> dict:
    venv = scratch / f"venv{extras or '-bare'}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    lock = str(REPO / "requirements" / "locked.txt")
    started = time.perf_counter()
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "-c", lock, f"{built}{extras}"], check=True
    )
    install_s = time.perf_counter() - started
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout.split()
    packages = sorted(x.split("==")[0] for x in listed if not x.startswith(("pip==", "jaxes==")))
    timings = []
    for _ in range(repeats + 1):
        out = subprocess.run(
            [python, "-c", TIMER], capture_output=True, text=True, check=True, cwd=scratch
        )
        timings.append(float(out.stdout))
    return {
        "extras": extras or "(none)",
        "packages": len(packages),
        "has_brax": "brax" in packages,
        "install_s": round(install_s, 1),
        "import_s_median": round(statistics.median(timings[1:]), 3),
        "import_s": [round(t, 3) for t in timings[1:]],
        "package_names": packages,
    }


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ("jax", "jaxlib"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="jaxes-install-") as tmp:
        scratch = Path(tmp)
        built = wheel(source_of(args.rev, scratch), scratch / "dist")
        for name, extras in INSTALLS.items():
            row = {"install": name} | measure(built, extras, scratch, args.repeats)
            rows.append(row)
            print(
                f"{name}: {row['packages']} packages, import jaxes {row['import_s_median']} s",
                file=sys.stderr,
                flush=True,
            )
    table = driver.markdown_table(
        "install | packages | Brax | import jaxes, s (median) | pip install, s",
        "lrlrr",
        [
            [
                f"`pip install 'jaxes{INSTALLS[r['install']]}'`",
                str(r["packages"]),
                "yes" if r["has_brax"] else "no",
                f"{r['import_s_median']:.2f}",
                f"{r['install_s']:.0f}",
            ]
            for r in rows
        ],
    )
    payload = {"settings": {"rev": args.rev or "working tree", "repeats": args.repeats}}
    write_results(args.out, info, [], [table], payload | {"rows": rows})


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, None, "install", out=True, child=False)
    parser.add_argument("--rev", help="a git revision to build instead of the working tree")
    parser.add_argument("--repeats", type=int, default=5, help="timed imports per install")
    args = parser.parse_args(argv)
    if args.out is None:
        rev_out = REPO / "build" / "install-rev.json"
        args.out = driver.results_path("install") if args.rev is None else rev_out
    return args


if __name__ == "__main__":
    os.environ.pop("PYTHONPATH", None)
    driver.main(sys.argv, parse_args, None, run)
