"""Renders the results pages' tables from the JSONs in benchmarks/results/, so that no number
on them can drift from its record.

    .venv/bin/python benchmarks/render.py           # rewrite the tables in the pages
    .venv/bin/python benchmarks/render.py --check   # exit 1, naming each page that differs

A page (docs/benchmarks.md and docs/results/*.md) holds each table between two markers,

    <!-- table: NAME -->
    ...
    <!-- /table -->

and everything between them is `TABLES[NAME](results)`: a markdown table, then a line naming,
for every JSON it read, the command, commit, CPU and date that JSON records (its `machine`;
"not recorded" where the JSON lacks a field). Nothing is measured here and nothing is
compiled; the Table 3 tables are computed by benchmarks/table3.py's own report functions
(which import jaxes, not run it). tests/test_results_pages.py re-renders every page and
asserts it equals the committed one.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from _common import REPO, RESULTS
from _driver import markdown_table

PAGES = (REPO / "docs" / "benchmarks.md", REPO / "docs" / "results")
START = re.compile(r"<!-- table: ([\w.-]+) -->\n")
END = "<!-- /table -->"
NOT_RECORDED = "not recorded"


def pages() -> list[Path]:
    """The pages whose tables are generated: docs/benchmarks.md and docs/results/*.md."""
    user, folder = PAGES
    return [user, *sorted(folder.glob("*.md"))]


class Results:
    """The JSONs of a results folder, read once each; `overrides` (a name -> JSON dict) stands
    in for files (the tests plant changed numbers this way)."""

    def __init__(self, root: Path = RESULTS, overrides: dict[str, dict] | None = None):
        self.root = Path(root)
        self.overrides = dict(overrides or {})
        self.cache: dict[str, dict] = {}

    def __call__(self, name: str) -> dict:
        if name in self.overrides:
            return self.overrides[name]
        if name not in self.cache:
            self.cache[name] = json.loads((self.root / name).read_text())
        return self.cache[name]

    def path(self, name: str) -> str:
        return f"benchmarks/results/{name}"


TABLES: dict[str, Callable[[Results], str]] = {}


def table(name: str):
    """Registers a renderer under `name` (the marker's NAME)."""

    def register(fn: Callable[[Results], str]) -> Callable[[Results], str]:
        TABLES[name] = fn
        return fn

    return register


# --------------------------------------------------------------------------------------------
# Where a result came from.
# --------------------------------------------------------------------------------------------


def when(text: str | None) -> str | None:
    """ "2026-12-01T12:07:12+00:00" -> "2026-12-01 12:07 UTC"."""
    if not text:
        return None
    match = re.match(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)", text)
    return f"{match.group(1)} {match.group(2)} UTC" if match else text


def described(machine: dict) -> str:
    """Command, commit, CPU and date of one run, each "not recorded" where `machine` lacks it."""
    command = machine.get("command")
    if isinstance(command, list):
        command = " ".join(command)
    commit = machine.get("git") or machine.get("revision") or machine.get("commit")
    cpu = machine.get("cpu_model") or machine.get("cpu")
    if isinstance(cpu, list):
        cpu = ", ".join(cpu)
    cores = machine.get("cpu_cores")
    date = when(machine.get("date_utc") or machine.get("utc") or machine.get("date"))
    return ", ".join(
        [
            f"command `{command}`" if command else f"command {NOT_RECORDED}",
            f"commit `{commit}`" if commit else f"commit {NOT_RECORDED}",
            f"CPU {cpu}" + (f" ({cores} cores)" if cores else "") if cpu else f"CPU {NOT_RECORDED}",
            date or f"date {NOT_RECORDED}",
        ]
    )


def sources(r: Results, *names: str, machines: dict[str, list[dict]] | None = None) -> str:
    """The provenance line under a table: for each JSON `name`, its path and `described` of its
    `machine` (or of each machine in `machines[name]`, for a JSON that appends runs)."""
    parts = []
    for name in names:
        runs = (machines or {}).get(name) or [r(name).get("machine") or {}]
        parts += [f"`{r.path(name)}`: {described(m)}" for m in runs]
    label = "Source" if len(parts) == 1 else "Sources"
    return f"{label}: " + "; ".join(parts) + "."


def with_sources(body: str, r: Results, *names: str, **kw) -> str:
    return body + "\n\n" + sources(r, *names, **kw)


# --------------------------------------------------------------------------------------------
# Numbers.
# --------------------------------------------------------------------------------------------


def g3(x: float) -> str:
    return f"{x:.3g}"


def f2(x: float) -> str:
    return f"{x:.2f}"


def sci(x: float | None) -> str:
    """Env steps as the docs write them: 2.04e7, 6.4e4 (below 10^4 as they are)."""
    if x is None:
        return "-"
    if abs(x) < 1e4:
        return f"{x:.3g}"
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def pct(x: float) -> str:
    return f"{x:.0%}"


def spread(values: list[float], fmt: Callable[[float], str] = f2) -> str:
    """median [min, max]."""
    return f"{fmt(statistics.median(values))} [{fmt(min(values))}, {fmt(max(values))}]"


def bold_below(value: float, threshold: float, fmt: Callable[[float], str] = f2) -> str:
    return f"**{fmt(value)}**" if value < threshold else fmt(value)


# --------------------------------------------------------------------------------------------
# Installing.
# --------------------------------------------------------------------------------------------


@table("install")
def t_install(r: Results) -> str:
    data = r("install.json")
    rows = [
        [
            f"`{row['extras']}`" if row["extras"] != "(none)" else "none",
            str(row["packages"]),
            "yes" if row["has_brax"] else "no",
            f"{row['import_s_median']:.2f}",
            f"{row['install_s']:.1f}",
        ]
        for row in data["rows"]
    ]
    head = "extras | packages | Brax | `import jaxes`, s (median of 5 processes) | install s"
    return with_sources(markdown_table(head, "lrlrr", rows), r, "install.json")


# --------------------------------------------------------------------------------------------
# Regimes: jaxes against evosax over d, P and call style.
# --------------------------------------------------------------------------------------------

STYLES = ("separate", "separate_donated", "fused", "generation_step")
STYLE_NAMES = ("separate", "separate, donated", "fused", "generation_step")
# Issue 58's targets: >= 0.8 in the separate styles, >= 1.0 fused and generation_step.
THRESHOLDS = {"separate": 0.8, "separate_donated": 0.8, "fused": 1.0, "generation_step": 1.0}
REGIMES = ("regimes.json", "regimes_1m.json")
# The newest run of the small cells (d <= 1,000), where the per-call cost decides the ratio;
# the larger d come from REGIMES.
REGIMES_SMALL, SMALL_MAX_D = "regimes_core_f193bbe.json", 1_000


def regime_cells(r: Results) -> list[dict]:
    """Every cell, each d from the newest run that has it."""
    small = r(REGIMES_SMALL)["cells"]
    large = [c for name in REGIMES for c in r(name)["cells"] if c["d"] > SMALL_MAX_D]
    return small + large


@table("regimes-summary")
def t_regimes_summary(r: Results) -> str:
    rows = []
    runs = [*REGIMES, REGIMES_SMALL]
    for name in runs:
        cells = r(name)["cells"]
        commit = r(name)["machine"].get("git", NOT_RECORDED)
        for d in sorted({c["d"] for c in cells}):
            at = [c for c in cells if c["d"] == d]
            row = [f"`{commit}`", f"{d:,}", str(len(at))]
            for style in STYLES:
                ratios = [c["styles"][style]["ratio"] for c in at if style in c["styles"]]
                misses = sum(x < THRESHOLDS[style] for x in ratios)
                row.append(f"{misses} ({f2(min(ratios))}–{f2(max(ratios))})")
            rows.append(row)
    head = "commit | d | cells (strategies × P) | " + " | ".join(
        f"{n}: below target (ratios)" for n in STYLE_NAMES
    )
    return with_sources(markdown_table(head, "lrrrrrr", rows), r, *runs)


@table("regimes")
def t_regimes(r: Results) -> str:
    rows = []
    cells = sorted(
        regime_cells(r), key=lambda c: (("open_es", "snes", "sep_cma_es").index(c["strategy"]),)
    )
    for c in cells:
        sep = c["styles"]["separate"]
        row = [c["strategy"], f"{c['d']:,}", str(c["P"]), g3(sep["jaxes"]["ms"])]
        row.append(g3(sep["evosax"]["ms"]))
        row += [bold_below(c["styles"][s]["ratio"], THRESHOLDS[s]) for s in STYLES]
        rows.append(row)
    head = "strategy | d | P | jaxes ms (separate) | evosax ms (separate) | " + " | ".join(
        STYLE_NAMES
    )
    return with_sources(markdown_table(head, "lrrrrrrrr", rows), r, REGIMES_SMALL, *REGIMES)


# --------------------------------------------------------------------------------------------
# ask/tell at 100k and 10M parameters.
# --------------------------------------------------------------------------------------------

ASKTELL = {
    "evosax": "evosax `Open_ES`",
    "readme_donated": "jaxes README loop (ask → vmap → tell), donated",
    "readme": "jaxes README loop, not donated",
    "evaluate": "jaxes ask + `jaxes.evaluate` + tell",
    "step": "jaxes `generation_step`",
    "readme_gaussian": 'jaxes README loop, `noise="gaussian"`',
    "step_gaussian": 'jaxes `generation_step`, `noise="gaussian"`',
}


@table("asktell")
def t_asktell(r: Results) -> str:
    return t_asktell_rows(r, tuple(ASKTELL))


@table("asktell-summary")
def t_asktell_summary(r: Results) -> str:
    return t_asktell_rows(r, ("evosax", "readme_donated", "step"))


def t_asktell_rows(r: Results, variants: tuple[str, ...]) -> str:
    every = r("asktell.json")["results"]
    base = {(x["d"], x["P"]): x for x in every if x["variant"] == "evosax"}
    data = [x for x in every if x["variant"] in variants]
    rows = []
    for x in data:
        e = base[(x["d"], x["P"])]
        rows.append(
            [
                f"{x['d']:,}",
                str(x["P"]),
                ASKTELL[x["variant"]],
                f"{x['median_s']:.4f}",
                f"{x['peak_rss_mib']:.0f}",
                f2(e["median_s"] / x["median_s"]),
                f2(e["peak_rss_mib"] / x["peak_rss_mib"]),
            ]
        )
    head = (
        "d | P | variant | median s/gen | peak RSS MiB | evosax s / jaxes s | "
        "evosax RSS / jaxes RSS"
    )
    return with_sources(markdown_table(head, "rrlrrrr", rows), r, "asktell.json")


# --------------------------------------------------------------------------------------------
# Big models.
# --------------------------------------------------------------------------------------------


def optimizer_name(x: dict) -> str:
    name = {"adam": "Adam(0.01)", "clipup": "ClipUp(0.01)"}.get(x["optimizer"], x["optimizer"])
    return name + ("" if x["track_best"] else ", `track_best=False`")


@table("bigmodel-plan")
def t_bigmodel_plan(r: Results) -> str:
    rows = [
        [
            x["size"],
            f"{x['params']:,}",
            x["task"],
            x["precision"],
            optimizer_name(x),
            str(x["P"]),
            f2(x["plan_gib"]),
            f"{x['plan_bytes_per_param']:.1f}",
        ]
        for x in r("bigmodel_plan.json")["results"]
        if x["kind"] == "plan"
    ]
    head = "size | params | task | dtype | optimizer | P | plan GiB | plan bytes/param"
    return with_sources(markdown_table(head, "lrlllrrr", rows), r, "bigmodel_plan.json")


@table("bigmodel-runs")
def t_bigmodel_runs(r: Results) -> str:
    rows = []
    for x in r("bigmodel.json")["results"]:
        if x["kind"] != "run":
            continue
        if x["status"] != "ok":
            rows.append([x["size"], x["task"], x["precision"], str(x["P"]), x["status"], "", ""])
            continue
        rows.append(
            [
                x["size"],
                x["task"],
                x["precision"],
                str(x["P"]),
                f2(x["median_s"]),
                f2(x["peak_rss_gib"]),
                f"{x['peak_rss_bytes_per_param']:.1f}",
            ]
        )
    head = "size | task | dtype | P | median s/gen | peak RSS GiB | RSS bytes/param"
    return with_sources(markdown_table(head, "lllrrrr", rows), r, "bigmodel.json")


# --------------------------------------------------------------------------------------------
# Every core.
# --------------------------------------------------------------------------------------------

SCALING = ("scaling.json", "scaling_sphere.json", "scaling_hopper64.json")


@table("scaling")
def t_scaling(r: Results) -> str:
    rows = []
    for name in SCALING:
        for x in r(name)["rows"]:
            task = "sphere 10M" if x["task"] != "hopper" else "hopper"
            rate = x.get("env_steps_per_s")
            rows.append(
                [
                    task,
                    str(x["population"]),
                    x["way"],
                    str(x["workers"]),
                    f"{rate:,.0f}" if rate else "-",
                    f"{x['seconds_per_generation']:.3f}",
                    f2(x["speedup"]),
                    pct(x["efficiency"]),
                ]
            )
    head = "task | P | workers are | n | env steps/s | s/generation | speedup | efficiency"
    return with_sources(markdown_table(head, "lrlrrrrr", rows), r, *SCALING)


def scaling_rate(x: dict) -> str:
    if x.get("env_steps_per_s"):
        return f"{x['env_steps_per_s']:,.0f} env steps/s"
    return f"{x['seconds_per_generation']:.3f} s/generation"


@table("scaling-summary")
def t_scaling_summary(r: Results) -> str:
    rows = []
    for name in SCALING:
        data = r(name)["rows"]
        for way in ("devices", "processes"):
            one = next(x for x in data if x["way"] == way and x["workers"] == 1)
            two = next(x for x in data if x["way"] == way and x["workers"] == 2)
            rows.append(
                [
                    "sphere 10M" if one["task"] != "hopper" else "hopper",
                    str(one["population"]),
                    way,
                    scaling_rate(one),
                    scaling_rate(two),
                    f2(two["speedup"]),
                    pct(two["efficiency"]),
                ]
            )
    head = "task | P | workers are | one | two | speedup | efficiency"
    return with_sources(markdown_table(head, "lrlrrrr", rows), r, *SCALING)


# --------------------------------------------------------------------------------------------
# Brax: jaxes against Brax's ES trainer.
# --------------------------------------------------------------------------------------------


def solve_rows(runs: list[dict], label: str, devices: int | None) -> list[str]:
    if devices is not None:
        runs = [x for x in runs if x.get("devices") == devices]
    by = {}
    for x in runs:
        by.setdefault(x["library"], {})[x["seed"]] = x["wall_s"]
    seeds = sorted(by["jaxes"])
    ratio = [by["jaxes"][s] / by["brax"][s] for s in seeds]
    ratio_xla = [by["jaxes"][s] / by["brax_jaxes_xla"][s] for s in seeds]
    med = statistics.median
    return [
        label,
        str(devices or 1),
        str(len(seeds)),
        f"{med(by['jaxes'].values()):.1f}",
        f"{med(by['brax'].values()):.1f}",
        f"**{f2(med(ratio))}** ({f2(min(ratio))}–{f2(max(ratio))})",
        f"{med(by['brax_jaxes_xla'].values()):.1f}",
        f"{f2(med(ratio_xla))} ({f2(min(ratio_xla))}–{f2(max(ratio_xla))})",
    ]


@table("brax-solve")
def t_brax_solve(r: Results) -> str:
    one = r("brax_vs_brax_es.json")
    devices = r("brax_vs_brax_es_devices.json")
    rows = [
        solve_rows(one["solve"]["runs"], f"`{one['machine']['git']}`", None),
        solve_rows(devices["solve"]["runs"], f"`{devices['machine']['git']}`", 1),
        solve_rows(devices["solve"]["runs"], f"`{devices['machine']['git']}`", 2),
    ]
    head = (
        "commit | CPU devices | seeds | jaxes s (median) | Brax ES s (median) | jaxes / Brax ES, "
        "median of the seeds' ratios (range) | Brax ES with jaxes' XLA options s | jaxes / that"
    )
    return with_sources(
        markdown_table(head, "lrrrrrrr", rows),
        r,
        "brax_vs_brax_es.json",
        "brax_vs_brax_es_devices.json",
    )


@table("brax-overhead")
def t_brax_overhead(r: Results) -> str:
    data = r("brax_vs_brax_es.json")
    rows = []
    for key, label in (("overhead", "jaxes'"), ("overhead_xla_defaults", "XLA's defaults")):
        for x in data[key]["rows"]:
            rows.append(
                [
                    label,
                    str(x["generation"]),
                    f"{x['block_s'] * 1e3:.1f}",
                    f"{x['rollouts_s'] * 1e3:.1f}",
                    f"{x['ratio']:.3f}",
                    f"{x['single_ratio']:.3f}",
                    f"{x['ask_tell_s'] * 1e3:.1f}",
                ]
            )
    head = (
        "XLA options | generation | 5 fused generations ms | the same 5 rollouts ms | ratio | "
        "1 generation ÷ 1 rollout | ask + tell alone ms"
    )
    return with_sources(markdown_table(head, "lrrrrrr", rows), r, "brax_vs_brax_es.json")


COMPILE = (
    ("compile_profile.json", "train_scan", "5 generations (`lax.scan`), what training runs"),
    ("compile_profile.json", "evaluation", "evaluation (8 episodes)"),
    ("compile_profile.json", "rollout", "one rollout of P = 64"),
    ("compile_profile.json", "generation", "one generation"),
    ("compile_profile.json", "block", "block and evaluation in one program"),
    ("compile_profile_repeats.json", "train_scan", "5 generations, 3 processes × 20 calls"),
    ("compile_profile_repeats.json", "evaluation", "evaluation, 3 processes × 20 calls"),
    ("compile_profile_repeats.json", "rollout", "one rollout, 3 processes × 20 calls"),
    ("compile_profile_hopper.json", "train_scan", "hopper preset, 5 generations"),
    ("compile_profile_halfcheetah.json", "train_scan", "halfcheetah preset, 5 generations"),
)


@table("compile-profile")
def t_compile_profile(r: Results) -> str:
    rows = []
    for name, piece, label in COMPILE:
        x = r(name)["pieces"][piece]
        ours, xla = x["jaxes"], x["xla_defaults"]
        rows.append(
            [
                label,
                f2(ours["compile_s"]),
                f2(xla["compile_s"]),
                f2(ours["compile_s"] / xla["compile_s"]),
                f"{ours['run_s'] * 1e3:.1f}",
                f"{xla['run_s'] * 1e3:.1f}",
            ]
        )
    head = (
        "piece | compile s, jaxes' options | compile s, XLA's defaults | ratio | "
        "run ms, jaxes' options | run ms, XLA's defaults"
    )
    names = list(dict.fromkeys(name for name, _, _ in COMPILE))
    return with_sources(markdown_table(head, "lrrrrr", rows), r, *names)


# --------------------------------------------------------------------------------------------
# Test functions against evosax.
# --------------------------------------------------------------------------------------------


@table("functions")
def t_functions(r: Results) -> str:
    rows = [
        [
            x["function"],
            str(x["d"]),
            x["strategy"],
            g3(x["evosax_median_best"]),
            g3(x["jaxes_median_best"]),
            f"{x['evosax_ms_per_gen']:.3f}",
            f"{x['jaxes_ms_per_gen']:.3f}",
            f2(x["time_ratio_jaxes_over_evosax"]),
            x["jaxes_matches_or_beats"],
        ]
        for x in r("functions.json")["table_rows"]
    ]
    head = (
        "function | d | strategy | evosax median best | jaxes median best | evosax ms/gen | "
        "jaxes ms/gen | time jaxes/evosax | jaxes matches or beats"
    )
    return with_sources(markdown_table(head, "lrlrrrrrl", rows), r, "functions.json")


@table("functions-summary")
def t_functions_summary(r: Results) -> str:
    data = r("functions.json")["table_rows"]
    rows = []
    for d in sorted({x["d"] for x in data}):
        at = [x for x in data if x["d"] == d]
        ok = sum(x["jaxes_matches_or_beats"] in ("matches", "beats") for x in at)
        times = [x["time_ratio_jaxes_over_evosax"] for x in at]
        rows.append([str(d), str(len(at)), f"{ok} of {len(at)}", spread(times)])
    head = (
        "d | rows (4 functions × 5 strategies) | final fitness matches or beats evosax's | "
        "time per generation, jaxes ÷ evosax, median [min, max]"
    )
    return with_sources(markdown_table(head, "rrrr", rows), r, "functions.json")


# --------------------------------------------------------------------------------------------
# COCO bbob.
# --------------------------------------------------------------------------------------------

OPTIMIZERS = {
    "jaxes-cma": "jaxes cma_es",
    "pycma": "pycma (CMA-ES)",
    "evosax-cma": "evosax CMA_ES",
    "jaxes-sep": "jaxes sep_cma_es",
    "jaxes-xnes": "jaxes xnes",
    "jaxes-crfm": "jaxes cr_fm_nes",
    "evosax-crfm": "evosax CR_FM_NES",
    "evosax-crfm-authors": "evosax CR_FM_NES as the authors'",
    "jaxes-ma": "jaxes ma_es",
    "evosax-ma": "evosax MA_ES",
    "jaxes-lm-ma": "jaxes lm_ma_es",
    "evosax-lm-ma": "evosax LM_MA_ES",
}


def instances(data: dict, optimizer: str) -> str:
    suite = data["experiments"][optimizer]["settings"]["suite"]
    return re.search(r"instances:(\S+)", suite).group(1).replace("-", "–")


def reached(functions: dict) -> str:
    """{"1": "2/2", "15": "1/2"} -> "f1 (2/2), f15 (1/2)"."""
    return ", ".join(f"f{k} ({v})" for k, v in functions.items()) or "none"


def bbob_rows(r: Results, names: tuple[str, ...], dims=None, order=None) -> list[list[str]]:
    rows = []
    for name in names:
        data = r(name)
        summary = data["summary"]
        if order:
            summary = sorted(summary, key=lambda s: (s["d"], order.index(s["optimizer"])))
        for s in summary:
            if dims and s["d"] not in dims:
                continue
            budgets = sorted(s["solved"], key=int)
            row = [str(s["d"]), OPTIMIZERS[s["optimizer"]], instances(data, s["optimizer"])]
            row += [f"{s['solved'][b]:.4f}" for b in budgets]
            if "ecdf_area" in s:
                row.append(f"{s['ecdf_area']:.3f}")
            rows.append(row)
    return rows


CMA_ORDER = ["jaxes-cma", "pycma", "evosax-cma", "jaxes-sep", "jaxes-xnes"]


def t_bbob_cma(r: Results, dims) -> str:
    rows = bbob_rows(r, ("bbob.json",), dims, CMA_ORDER)
    head = "d | optimizer | instances | solved by 10·d | 100·d | 1000·d"
    return markdown_table(head, "rllrrr", rows)


@table("bbob-cma")
def t_bbob_cma_user(r: Results) -> str:
    return with_sources(t_bbob_cma(r, (10, 20)), r, "bbob.json")


@table("bbob-cma-all")
def t_bbob_cma_all(r: Results) -> str:
    data = r("bbob.json")
    body = t_bbob_cma(r, None)
    runs = [
        data["experiments"][k] | {"date_utc": data["experiments"][k]["started_utc"]}
        for k in data["experiments"]
    ]
    return with_sources(body, r, "bbob.json", machines={"bbob.json": [data["machine"], *runs]})


@table("bbob-cma-reached")
def t_bbob_cma_reached(r: Results) -> str:
    data = r("bbob.json")
    rows = [
        [str(s["d"]), OPTIMIZERS[s["optimizer"]], reached(s["final_target_functions"])]
        for s in sorted(data["summary"], key=lambda s: (s["d"], CMA_ORDER.index(s["optimizer"])))
        if s["d"] in (10, 20)
    ]
    return with_sources(
        markdown_table("d | optimizer | f* + 1e-8 reached within 1000·d (instances)", "rll", rows),
        r,
        "bbob.json",
    )


@table("bbob-speed")
def t_bbob_speed(r: Results) -> str:
    rows = [
        [
            str(x["d"]),
            str(x["lambda"]),
            f"f{x['function']}",
            f2(x["jaxes"]["us_per_eval"]),
            f2(x["pycma"]["us_per_eval"]),
            f2(x["pycma"]["cocoex_us_per_eval"]),
            f"{x['ratio']:.1f}",
            pct(x["jaxes"]["other_cpu_share"]),
        ]
        for x in r("bbob_speed.json")["rows"]
    ]
    head = (
        "d | λ | function | jaxes µs/eval | pycma + cocoex µs/eval | of which cocoex | "
        "pycma ÷ jaxes | CPU taken by others"
    )
    return with_sources(markdown_table(head, "rrlrrrrr", rows), r, "bbob_speed.json")


def t_bbob_tagged(r: Results, names: tuple[str, ...], order: list[str]) -> str:
    rows = []
    for name in names:
        data = r(name)
        suite = next(iter(data["experiments"].values()))["settings"]["suite"]
        instances = suite.split("instances:")[1].split()[0]  # "bbob instances:1-2 ..."
        for s in sorted(data["summary"], key=lambda s: order.index(s["optimizer"])):
            budgets = sorted(s["solved"], key=int)
            rows.append(
                [str(s["d"]), instances, OPTIMIZERS[s["optimizer"]], str(s["problems"])]
                + [f"{s['solved'][b]:.3f}" for b in budgets]
                + [f"{s['ecdf_area']:.3f}", reached(s["final_target_functions"])]
            )
    head = (
        "d | bbob instances | optimizer | problems | 10·d | 100·d | 1000·d | 10⁴·d | "
        "ECDF area to 10⁴·d | f* + 1e-8 reached (instances)"
    )
    experiments = {
        name: [e | {"date_utc": e["started_utc"]} for e in r(name)["experiments"].values()]
        for name in names
    }
    machines = {name: [r(name)["machine"], *runs] for name, runs in experiments.items()}
    # One experiment command ran every optimizer of a tag: name each command once.
    for name, runs in machines.items():
        seen, kept = set(), []
        for m in runs:
            if m["command"] not in seen:
                seen.add(m["command"])
                kept.append(m)
        machines[name] = kept
    return with_sources(markdown_table(head, "rlllrrrrrl", rows), r, *names, machines=machines)


@table("bbob-crfm")
def t_bbob_crfm(r: Results) -> str:
    names = ("bbob_crfm.json", "bbob_crfm_i3_7.json", "bbob_crfm_i8_15.json")
    names += ("bbob_crfm_authors_i3_15.json", "bbob_crfm_d40.json")
    return t_bbob_tagged(r, names, ["jaxes-crfm", "evosax-crfm", "evosax-crfm-authors"])


@table("bbob-ma")
def t_bbob_ma(r: Results) -> str:
    order = ["pycma", "jaxes-ma", "evosax-ma", "jaxes-lm-ma", "evosax-lm-ma"]
    return t_bbob_tagged(r, ("bbob_ma.json", "bbob_ma_d40.json"), order)


@table("lm-ma-es-large")
def t_lm_ma_es_large(r: Results) -> str:
    rows = []
    for x in r("lm_ma_es_large.json")["rows"]:
        hit = x["hits"].get("-8")
        rows.append(
            [
                x.get("library", "jaxes"),
                f"f{x['function']}",
                f"{x['d']:,}",
                str(x["lambda"]),
                f"{x['evaluations']:,}",
                f"{x['best_delta_f']:.2g}",
                f"{hit:,}" if hit else "miss",
                f"{x['us_per_evaluation']:.0f}",
                f"{x['memory_tell']['total_bytes'] / 2**20:.1f}",
                f"{x['state_bytes'] / 2**20:.1f}",
                x["cma_es"],
            ]
        )
    head = (
        "library | function | d | λ = m | evaluations | Δf at the end | evaluations to f* + "
        "1e-8 | µs/eval | donated `tell` plan MiB | state MiB | `cma_es(λ)` at this d"
    )
    return with_sources(markdown_table(head, "llrrrrrrrrl", rows), r, "lm_ma_es_large.json")


@table("cr-fm-nes-reference")
def t_cr_fm_nes_reference(r: Results) -> str:
    def worst(errors: dict) -> str:
        field = max(errors, key=errors.get)
        return f"{errors[field]:.2g} ({field})"

    rows = [
        [str(x["d"]), str(x["lambda"]), str(x["generations"])]
        + [worst(x[k]) for k in ("max_relative_error", "evosax_max_relative_error")]
        + [worst(x["evosax_as_authors_max_relative_error"])]
        for x in r("cr_fm_nes_reference.json")["rows"]
    ]
    head = "d | λ | generations | jaxes `cr_fm_nes` | evosax `CR_FM_NES` | evosax as the authors'"
    return with_sources(markdown_table(head, "rrrlll", rows), r, "cr_fm_nes_reference.json")


# --------------------------------------------------------------------------------------------
# Table 3 of Salimans et al. 2017 (benchmarks/table3.py computes the tables from the records).
# --------------------------------------------------------------------------------------------

TABLE3_FOLDERS = {"table3": "table3", "table3-heldout": "table3-seeds-15-20"}


def table3_records(r: Results, folder: str) -> list[dict]:
    import table3

    records = []
    for env in table3.ENVS:
        name = f"{folder}/{env}.json"
        if name in r.overrides or (r.root / name).is_file():
            records.append(table3.judged_record(r(name), None))
    return records


def table3_sources(records: list[dict], folder: str) -> str:
    sittings = [s for rec in records for s in rec["sittings"]]
    runs = {}
    for s in sorted(sittings, key=lambda s: s["machine"].get("date_utc", "")):
        m = s["machine"]
        runs.setdefault((m["command"], m.get("git")), m)
    parts = "; ".join(described(m) for m in runs.values())
    return (
        f"Records `benchmarks/results/{folder}/<env>.json` ({len(records)} envs, "
        f"{len(sittings)} sittings); the sittings: {parts}. Each env's `jaxes train` command is "
        "in its record (`sittings[].command`)."
    )


@table("table3")
def t_table3(r: Results) -> str:
    import table3

    records = table3_records(r, TABLE3_FOLDERS["table3"])
    body = table3.table3_markdown(records) + "\n\n" + table3.headline(records)
    return body + "\n\n" + table3_sources(records, TABLE3_FOLDERS["table3"])


@table("table3-heldout")
def t_table3_heldout(r: Results) -> str:
    import table3

    folder = TABLE3_FOLDERS["table3-heldout"]
    records = table3_records(r, folder)
    body = table3.table3_markdown(records) + "\n\n" + table3.headline(records)
    return body + "\n\n" + table3_sources(records, folder)


@table("table3-details")
def t_table3_details(r: Results) -> str:
    import table3

    folder = TABLE3_FOLDERS["table3"]
    records = table3_records(r, folder)
    parts = [table3.details_markdown(records), "", table3.settings_markdown(records)]
    brax = table3.brax_markdown(records)
    if brax:
        parts += ["", brax]
    return "\n".join(parts) + "\n\n" + table3_sources(records, folder)


# --------------------------------------------------------------------------------------------
# MinAtar.
# --------------------------------------------------------------------------------------------


def eval_by(seed: dict, column: str, limit: float) -> float | None:
    """The seed's last evaluation at or before `limit` of `column` (None: the seed never got
    that far, or had no evaluation by then)."""
    cols = seed["curve_columns"]
    i, j = cols.index(column), cols.index("eval_return")
    if not seed["curve"] or seed["curve"][-1][i] < limit:
        return None
    before = [p[j] for p in seed["curve"] if p[i] <= limit]
    return before[-1] if before else None


def median_or_dash(values: list[float | None], fmt=f2) -> str:
    if any(v is None for v in values):
        return "-"
    return fmt(statistics.median(values))


@table("minatar-heldout")
def t_minatar_heldout(r: Results) -> str:
    data = r("minatar_heldout.json")
    rows = []
    for g in data["games"]:
        seeds = g["seeds"]
        ppo = g["ppo_return"]
        rows.append(
            [
                g["game"],
                f"{ppo:g}" if ppo is not None else "-",
                median_or_dash([eval_by(s, "total_alive_steps", 1e7) for s in seeds]),
                median_or_dash([eval_by(s, "total_env_steps", 1e7) for s in seeds]),
                spread([s["final_eval_return"] for s in seeds]),
                spread([s["best_eval_return"] for s in seeds]),
                str(max(len(s["curve"]) for s in seeds)),
                sci(g["alive_steps"]["median"]),
                sci(g["env_steps"]["median"]),
                f"{g['previous']['final_eval_return']:g} @ {g['previous']['minutes']:.0f} min",
                f2(g["eval_at_previous_minutes"]),
            ]
        )
    head = (
        "game | PPO return | eval @ 10M alive steps | eval @ 10M simulated steps | final eval, "
        "median [min, max] | best eval (max over its evaluations), median [min, max] | "
        "evaluations per seed | alive env steps | simulated env steps | previous table (seeds "
        "0-2, Intel Xeon) | this setting at that wall clock"
    )
    sittings = {"minatar_heldout.json": [s["machine"] for s in data["sittings"]]}
    return with_sources(
        markdown_table(head, "lrrrrrrrrrr", rows), r, "minatar_heldout.json", machines=sittings
    )


@table("minatar-overhead")
def t_minatar_overhead(r: Results) -> str:
    rows = []
    preset = r("minatar_overhead_preset.json")["overhead"]
    rows.append(
        [
            f"P = {preset['population']}, {preset['episode_length']}-step episodes, one chunk",
            f2(statistics.median(preset["jaxes_generation_s"])),
            f2(statistics.median(preset["plain_rollout_s"])),
            f"{preset['overhead']:+.1%} per env step",
        ]
    )
    small = r("minatar_overhead.json")["overhead"]
    rows.append(
        [
            f"P = {small['population']}, {small['episode_length']}-step episodes, one chunk",
            f"{statistics.median(small['jaxes_generation_s']):.3f}",
            f"{statistics.median(small['plain_rollout_s']):.3f}",
            f"{small['overhead']:+.1%} per env step",
        ]
    )
    rows.append(
        [
            f"P = {small['population']}, early exit (the task's default)",
            f"{statistics.median(small['jaxes_early_exit_generation_s']):.3f}",
            f"{statistics.median(small['plain_rollout_s']):.3f}",
            f"{small['early_exit_overhead_per_simulated_step']:+.1%} per simulated step; "
            f"{small['early_exit_speedup_per_generation']:.1f}× faster per generation",
        ]
    )
    head = "Breakout-MinAtar | jaxes s/generation (median) | plain `vmap` rollout s | overhead"
    return with_sources(
        markdown_table(head, "lrrl", rows),
        r,
        "minatar_overhead_preset.json",
        "minatar_overhead.json",
    )


# --------------------------------------------------------------------------------------------
# Control policies: own, shared and factored members.
# --------------------------------------------------------------------------------------------

NETWORKS = {
    "minatar_conv": "MinAtar conv (Breakout)",
    "brax_mlp_32x32": "Brax MLP (32, 32), hopper's sizes",
}


@table("policy-step")
def t_policy_step(r: Results) -> str:
    rows = []
    for x in r("policy_cost.json")["policy_step"]:
        rows.append(
            [
                NETWORKS.get(x["network"], x["network"]),
                f"{x['params']:,}",
                str(x["members"]),
                f"{x['shared_ms']:.2f}",
                f"{x['own_ms']:.2f} ({pct(x['own_throughput_vs_shared'])})",
                f"{x['factored_r1_ms']:.2f} ({pct(x['factored_r1_throughput_vs_shared'])})",
                f"{x['factored_r4_ms']:.2f} ({pct(x['factored_r4_throughput_vs_shared'])})",
            ]
        )
    head = (
        "network | params | P | shared weights ms | own weights ms (% of shared throughput) | "
        "factored r = 1 | factored r = 4"
    )
    return with_sources(markdown_table(head, "lrrrrrr", rows), r, "policy_cost.json")


SETTINGS_E2E = {
    "breakout_full": ("Breakout, vbn_conv (the old preset), full rank", None),
    "breakout_lowrank_r1": ("Breakout, vbn_conv, r = 1", "breakout_full"),
    "breakout_lowrank_r1_reference32": (
        "Breakout, vbn_conv, r = 1, 32-observation reference (the MinAtar preset)",
        "breakout_full",
    ),
    "breakout_conv_full": ("Breakout, conv (no VBN), full rank", None),
    "breakout_conv_lowrank_r1": ("Breakout, conv (no VBN), r = 1", "breakout_conv_full"),
    "hopper_full": ("hopper, linear, full rank", None),
    "hopper_lowrank_r1": ("hopper, linear, r = 1", "hopper_full"),
}


@table("policy-e2e")
def t_policy_e2e(r: Results) -> str:
    return t_policy_e2e_rows(r, ("Breakout-MinAtar", "hopper"))


@table("policy-e2e-breakout")
def t_policy_e2e_breakout(r: Results) -> str:
    return t_policy_e2e_rows(r, ("Breakout-MinAtar",))


def t_policy_e2e_rows(r: Results, envs: tuple[str, ...]) -> str:
    rows = []
    for name in ("policy_cost.json", "policy_cost_e2e.json"):
        data = r(name)
        by = {x["setting"]: x for x in data["end_to_end"]}
        for x in data["end_to_end"]:
            if x["env"] not in envs:
                continue
            label, base = SETTINGS_E2E[x["setting"]]
            row = [f"`{data['machine']['git']}`", label, f"{x['env_steps_per_s']:,.0f}"]
            if base:
                b = by[base]
                paired = [a / c for a, c in zip(x["rates"], b["rates"], strict=True)]
                row += [
                    f"{x['env_steps_per_s'] / b['env_steps_per_s']:.2f}×",
                    f"{statistics.median(paired):.2f}× [{min(paired):.2f}, {max(paired):.2f}]",
                ]
            else:
                row += ["", ""]
            rows.append(row)
    head = (
        "commit | setting (P = 256 on Breakout, 32 on hopper) | env steps/s (median of 3 "
        "rounds) | ÷ its full-rank row, medians | ÷ its full-rank row, round by round: median "
        "[min, max]"
    )
    loads = {
        name: [
            r(name)["machine"]
            | {
                "cpu_model": f"{r(name)['machine']['cpu_model']}, load average at the start "
                f"{r(name)['machine']['load_average_at_start'][0]:.2f}"
            }
        ]
        for name in ("policy_cost.json", "policy_cost_e2e.json")
    }
    return with_sources(
        markdown_table(head, "llrrr", rows),
        r,
        "policy_cost.json",
        "policy_cost_e2e.json",
        machines=loads,
    )


# --------------------------------------------------------------------------------------------
# Sequence models.
# --------------------------------------------------------------------------------------------


@table("sequence-throughput")
def t_sequence_throughput(r: Results) -> str:
    rows = [
        [
            str(x["P"]),
            str(x["sequences"]),
            x["method"],
            f"{x['s']:.3f}",
            pct(x["throughput_fraction"]),
            pct(x["throughput_fraction_cpu"]),
        ]
        for x in r("sequence_throughput_quiet.json")["throughput"]
    ]
    head = "P | sequences | method | median s | throughput, wall | throughput, CPU s"
    return with_sources(markdown_table(head, "rrlrrr", rows), r, "sequence_throughput_quiet.json")


PLANS = (
    "sequence_memory_1b.json",
    "sequence_memory_1b_float32_weights_unstreamed.json",
    "sequence_memory_1b_float32_weights_unstreamed_xla_memory_flags.json",
    "sequence_memory_1b_bfloat16_weights_streamed.json",
    "sequence_memory_1b_bfloat16_weights_unstreamed.json",
    "sequence_memory_125m_350m_streamed.json",
)


@table("sequence-plan")
def t_sequence_plan(r: Results) -> str:
    rows = []
    for name in PLANS:
        data = r(name)
        flags = "XLA_FLAGS=" in data["machine"]["command"]
        for p in data["plans"]:
            parts = p["parts"]
            rows.append(
                [
                    p["size"],
                    p["weights"],
                    "yes" if p["stream_weights"] else "no",
                    "the two memory flags" if flags else "defaults",
                    f"{p['batch']} × ({p['prompt']} + {p['steps']})",
                    f"**{f2(p['beyond_bytes_per_param'])}**",
                    f2(parts["evaluate"]["beyond_bytes_per_param"]),
                    f2(parts["tell"]["beyond_bytes_per_param"]),
                    f2(p["live_bytes_per_param"]),
                    f2(p["live_gib"]),
                ]
            )
    head = (
        "model | weights | `stream_weights` | XLA options | decode per member: prompts × (prompt "
        "+ new tokens) | bytes/param beyond master and optimizer | evaluate alone | tell alone "
        "| all live bytes/param | live GiB"
    )
    return with_sources(markdown_table(head, "llllrrrrrr", rows), r, *PLANS)


@table("factored-tell")
def t_factored_tell(r: Results) -> str:
    rows = [
        [
            f"{x['d']} × {x['layers']}",
            str(x["P"]),
            str(x["rank"]),
            x["dtype"],
            f2(x["factored_temp_bytes_per_param"]),
            f2(x["dense_temp_bytes_per_param"]),
            f2(x["ratio"]),
        ]
        for x in r("factored_tell.json")["rows"]
    ]
    head = (
        "d × layers | P | r | dtype | temp bytes/param, factored | dense | dense ms ÷ factored ms"
    )
    return with_sources(markdown_table(head, "lrrlrrr", rows), r, "factored_tell.json")


def countdown_machines(r: Results) -> dict:
    """countdown_seeds.json has no `machine`: its `cpu` and `commits` are what it records."""
    data = r("countdown_seeds.json")
    machine = {"cpu": data.get("cpu"), "commit": ", ".join(data.get("commits") or []) or None}
    return {"countdown_seeds.json": [machine]}


@table("countdown")
def t_countdown(r: Results) -> str:
    import countdown_seeds

    data = r("countdown_seeds.json")
    order = [
        f"{m} | {model} | {budget}"
        for model, budget in (("small", "wall"), ("small", "tokens"), ("large", "wall"))
        for m in ("ES Qiu", "ES EGGROLL", "ES best", "GRPO tuned")
    ]
    methods = {k: data["methods"][k] for k in order if k in data["methods"]}
    return with_sources(
        countdown_seeds.markdown(methods), r, "countdown_seeds.json", machines=countdown_machines(r)
    )


@table("countdown-summary")
def t_countdown_summary(r: Results) -> str:
    data = r("countdown_seeds.json")["methods"]
    cells = (("small", "wall"), ("small", "tokens"), ("large", "wall"))
    rows = []
    for method in ("ES Qiu", "ES EGGROLL", "ES best", "GRPO tuned"):
        row = [method]
        for model, budget in cells:
            m = data.get(f"{method} | {model} | {budget}")
            lo, hi = m["interval"] if m else (None, None)
            row.append(f"{m['mean']:.3f} [{lo:.3f}, {hi:.3f}]" if m else "")
        rows.append(row)
    head = (
        "held-out accuracy, mean over seeds 1–5 [95 % t interval] | small model, 60 s | "
        "small model, 3e6 tokens | large model, 60 s"
    )
    return with_sources(
        markdown_table(head, "lrrr", rows),
        r,
        "countdown_seeds.json",
        machines=countdown_machines(r),
    )


@table("es-vs-grpo-pilot")
def t_es_vs_grpo_pilot(r: Results) -> str:
    name = "es_vs_grpo_pilot.json"
    data = r(name)
    rows = []
    for key, arm in data["arms"].items():
        family, base, budget = key.split(" | ")
        lo, hi = arm["interval"]
        rows.append(
            [
                family,
                f"`{arm['arm']}`",
                base,
                budget,
                ", ".join(str(s) for s in arm["seeds"]),
                f"{arm['mean']:.3f} [{lo:.3f}, {hi:.3f}]",
                f"{arm['above_floor']:+.3f}",
                spread(arm["tokens"], lambda x: f"{x:,.0f}"),
                spread(arm["train_seconds"], lambda x: f"{x:.0f}"),
                spread(arm["moved"], lambda x: f"{x:.4f}"),
            ]
        )
    head = (
        "arm | setting | base | budget | seeds | held-out exact, mean [95 % t] | above the floor"
        " | tokens | train s | moved by the end (‖Δθ‖/‖θ‖)"
    )
    bases = "; ".join(
        f"{b['base']}: pass@1 {b['heldout_pass1']:.4f} ({b['greedy_problems']} problems), "
        f"pass@16 {b['heldout_pass16']:.4f} ({b['sampled_problems']})"
        for b in data["bases"]
    )
    verdicts = "; ".join(
        f"{v['es']} − GRPO tuned, {v['base']}, {v['budget']}: {v['difference']:+.3f} "
        f"[{v['interval'][0]:+.3f}, {v['interval'][1]:+.3f}], "
        f"{'told apart' if v['told_apart'] else 'not told apart'}, "
        f"{'equivalent' if v['equivalent'] else 'not shown equivalent'} at ±{data['margin']}"
        for v in data["verdicts"]
    )
    body = markdown_table(head, "lllllrrrrr", rows)
    body += (
        f"\n\nFloor (one answer shape per count of numbers, chosen on the training problems): "
        f"{data['floor']:.4f} on {data['test_problems']} held-out problems. Bases: {bases}. "
        f"Welch differences and TOST: {verdicts or 'none (fewer than 2 seeds)'}."
    )
    return with_sources(body, r, name, machines={name: [data]})


# --------------------------------------------------------------------------------------------
# Hugging Face checkpoints.
# --------------------------------------------------------------------------------------------


@table("llm-reference")
def t_llm_reference(r: Results) -> str:
    rows = [
        [
            x["model"],
            f"{x['max_abs_error']:.3g}",
            f"{x['mean_abs_error']:.2g}",
            "equal" if x["greedy_tokens_equal"] else "differ",
        ]
        for x in r("llm_reference.json")["rows"]
    ]
    head = "fixture | largest logit error | mean | 32 greedy tokens"
    return with_sources(markdown_table(head, "lrrl", rows), r, "llm_reference.json")


def llm_speed_rows(run: dict) -> dict:
    """(dtype, P, column) -> "ratio (CPU ratio)" of one llm_speed run."""
    out = {}
    for x in run["rows"]:
        if x["method"].startswith("members"):
            column = f"rank {x['rank']}" + (" int8" if x["int8"] else "")
            out[(x["dtype"], x["P"], column)] = f"{x['ratio']:.2f} ({x['ratio_cpu']:.2f})"
    return out


@table("llm-speed")
def t_llm_speed(r: Results) -> str:
    return t_llm_speed_rows(r, None)


@table("llm-speed-p64")
def t_llm_speed_p64(r: Results) -> str:
    return t_llm_speed_rows(r, 64)


def t_llm_speed_rows(r: Results, population: int | None) -> str:
    data = r("llm_speed.json")
    rows, used = [], []
    runs = [x for x in data["runs"] if x["settings"].get("stream") in (None, "off")]
    for run in sorted(runs, key=lambda x: x["settings"]["model"] != "tiny"):
        cells = llm_speed_rows(run)
        pairs = [(d, p) for d, p, _ in cells if population in (None, p)]
        if not pairs:
            continue
        used.append(run["machine"])
        for dtype, P in dict.fromkeys(pairs):
            row = [run["settings"]["model"], dtype, str(P)]
            row += [cells.get((dtype, P, f"rank {k}"), "") for k in (1, 2, 3, 4)]
            row += [cells.get((dtype, P, "rank 1 int8"), ""), f"`{run['machine']['git']}`"]
            rows.append(row)
    head = (
        "model | dtype | P | rank 1 | rank 2 | rank 3 | rank 4 | rank 1 from an int8 base | commit"
    )
    return with_sources(
        markdown_table(head, "llrrrrrrl", rows),
        r,
        "llm_speed.json",
        machines={"llm_speed.json": used},
    )


@table("llm-streaming")
def t_llm_streaming(r: Results) -> str:
    """Each stream=both run of llm_speed: streamed ÷ unstreamed speed of both arms."""
    rows, used = [], []
    for run in r("llm_speed.json")["runs"]:
        if run["settings"].get("stream") != "both":
            continue
        used.append(run["machine"])
        by = {(x["P"], x["method"], x["stream_weights"]): x for x in run["rows"]}
        for P, method, _ in sorted(k for k in by if not k[2]):
            off, on = by[(P, method, False)], by.get((P, method, True))
            if on is None:
                continue
            loads = [v for x in (off, on) for v in x.get("round_loads", [])]
            rows.append(
                [
                    run["settings"]["model"], str(P), method,
                    f"{off['s'] / on['s']:.2f} ({off['cpu_s'] / on['cpu_s']:.2f})",
                    spread(loads) if loads else NOT_RECORDED,
                    f"{len(off['seconds'])}", f"`{run['machine']['git']}`",
                ]
            )  # fmt: skip
    head = (
        "model | P | arm | streamed ÷ unstreamed speed (CPU time) | load during the rounds | "
        "rounds | commit"
    )
    return with_sources(
        markdown_table(head, "lrlrrrl", rows),
        r,
        "llm_speed.json",
        machines={"llm_speed.json": used},
    )


@table("llm-plan")
def t_llm_plan(r: Results) -> str:
    data = r("llm_plan.json")
    latest = {}
    for plan, run in zip(data["plans"], data["runs"], strict=True):
        latest[(plan["size"], plan["stream_weights"])] = (plan, run)
    rows, used = [], []
    for (size, streamed), (p, run) in sorted(
        latest.items(), key=lambda kv: (not kv[0][1], float(kv[0][0].rstrip("B")))
    ):
        used.append(run["machine"])
        token = p.get("bytes_per_token_in_flight") if streamed else None
        rows.append(
            [
                f"Qwen2.5 {size}",
                "yes" if streamed else "no",
                f"`{run['machine']['git']}`",
                str(p["chunk"]),
                f"**{f2(p['bytes_per_param_beyond_master'])}**",
                f2(p["bytes_per_param_excluding_tokens"]) if token else "",
                f"{token:,.0f}" if token else "",
                f"{p['kv_cache_bytes_per_token']:,}" if token else "",
                f"{p['live_gib']:.1f}",
            ]
        )
    head = (
        "model | streamed | commit | chunk | bytes/param beyond master and optimizer | without "
        "the token term | token term, bytes per in-flight token | KV cache, bytes per token | "
        "live GiB"
    )
    return with_sources(
        markdown_table(head, "lllrrrrrr", rows),
        r,
        "llm_plan.json",
        machines={"llm_plan.json": used},
    )


@table("llm-finetune")
def t_llm_finetune(r: Results) -> str:
    data = r("llm_finetune.json")
    rows = []
    for x in data["runs"]:
        flags = x["flags"]

        def flag(name, default, flags=flags):
            return flags[flags.index(name) + 1] if name in flags else default

        label = (
            f"σ {flag('--sigma', '1e-3 (default)')}, α {flag('--learning-rate', '5e-4 (default)')}"
            f", batch {flag('--batch-size', '4 (default)')}"
        )
        rows.append(
            [
                label,
                str(x["seed"]),
                f"{x['wall_s']:.0f}",
                f"{x['before']:.3f}",
                *(f"{x['eval_return'][k]:.3f}" for k in sorted(x["eval_return"], key=int)),
            ]
        )
    head = "settings | seed | wall s | before | after 10 generations | after 20"
    return with_sources(markdown_table(head, "lrrrrr", rows), r, "llm_finetune.json")


# --------------------------------------------------------------------------------------------
# Guided ES and the GA.
# --------------------------------------------------------------------------------------------


def evals(s: dict) -> str:
    if s["misses"] == len(s["per_seed"]):
        return f"miss ({s['misses']} of {len(s['per_seed'])})"
    text = f"{s['median']:,.0f} [{s['min']:,.0f}, {s['max']:,.0f}]"
    return text + (f" ({s['misses']} missed)" if s["misses"] else "")


@table("guided-es")
def t_guided_es(r: Results) -> str:
    rows = [
        [
            f"{x['rho']:g}",
            x["method"],
            f"{x['alpha']:g}" if x["alpha"] is not None else "",
            f"{x['best']['lr']:g}",
            evals(x["best"]["to_0.1"]),
            evals(x["best"]["to_0.01"]),
        ]
        for x in r("guided_es.json")["rows"]
    ]
    head = "ρ (bias ÷ ‖∇L(x₀)‖) | strategy | α | lr | evaluations to 0.1 L₀ | to 0.01 L₀"
    return with_sources(markdown_table(head, "llrrll", rows), r, "guided_es.json")


def t_ga(r: Results, name: str, budgets: list[int] | None = None) -> str:
    import ga_vs_open_es

    data = r(name)
    settings = data["settings"]
    lines = ga_vs_open_es.table(data["rows"], settings["target"], budgets or settings["budgets"])
    return with_sources("\n".join(lines), r, name)


@table("ga-cartpole")
def t_ga_cartpole(r: Results) -> str:
    return t_ga(r, "ga_vs_open_es_cartpole.json")


@table("ga-breakout")
def t_ga_breakout(r: Results) -> str:
    return t_ga(r, "ga_vs_open_es_breakout.json", [125_000, 250_000, 500_000])


# --------------------------------------------------------------------------------------------
# The pages.
# --------------------------------------------------------------------------------------------


class PageError(ValueError):
    """A page whose markers cannot be rendered (unknown name, a marker left open)."""


def render_text(text: str, r: Results | None = None, where: str = "page") -> str:
    """`text` with every marked table replaced by its render."""
    r = r or Results()
    out, at = [], 0
    for match in START.finditer(text):
        if match.start() < at:
            raise PageError(f"{where}: table {match.group(1)!r} starts inside another")
        end = text.find(END, match.end())
        if end < 0:
            raise PageError(f"{where}: table {match.group(1)!r} has no {END}")
        name = match.group(1)
        if name not in TABLES:
            raise PageError(f"{where}: no table named {name!r} (benchmarks/render.py TABLES)")
        out += [text[at : match.end()], TABLES[name](r), "\n"]
        at = end
    return "".join(out) + text[at:]


def stale(r: Results | None = None) -> list[str]:
    """The pages whose text differs from their render."""
    r = r or Results()
    return [
        str(p.relative_to(REPO))
        for p in pages()
        if render_text(p.read_text(), r, str(p.relative_to(REPO))) != p.read_text()
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page differs")
    args = parser.parse_args(argv)
    r = Results()
    if args.check:
        differ = stale(r)
        for page in differ:
            print(f"{page}: its tables differ from benchmarks/results (run benchmarks/render.py)")
        return 1 if differ else 0
    for page in pages():
        text = page.read_text()
        new = render_text(text, r, str(page.relative_to(REPO)))
        if new != text:
            page.write_text(new)
            print(f"wrote {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
