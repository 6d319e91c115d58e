"""The results pages are drawn from their records (issue 63): benchmarks/render.py re-renders
docs/benchmarks.md and docs/results/*.md from benchmarks/results/*.json, and each committed
page must equal its render, so that no number on them drifts from its JSON. Fast: it reads
JSON and imports benchmarks/table3.py (which imports jaxes), and compiles nothing."""

import copy
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import `_common` as a sibling

import render  # noqa: E402

USER_PAGE = ROOT / "docs" / "benchmarks.md"
GENERATED = [p for p in render.pages() if "<!-- table: " in p.read_text()]


@pytest.fixture(scope="module")
def results():
    return render.Results()


@pytest.mark.parametrize("page", render.pages(), ids=lambda p: p.name)
def test_each_page_equals_its_render(page, results):
    text = page.read_text()
    rendered = render.render_text(text, results, page.name)
    assert rendered == text, (
        f"{page.relative_to(ROOT)} differs from its JSONs: run .venv/bin/python "
        "benchmarks/render.py (and check the numbers that moved)"
    )


def test_the_generated_pages_are_the_user_page_and_the_results_pages():
    names = {p.relative_to(ROOT).as_posix() for p in GENERATED}
    assert {"docs/benchmarks.md", "docs/results/speed.md", "docs/results/learning.md"} <= names


def test_the_user_page_is_at_most_400_lines():
    assert len(USER_PAGE.read_text().splitlines()) <= 400


@pytest.mark.parametrize("page", GENERATED, ids=lambda p: p.name)
def test_every_table_on_a_results_page_is_generated(page):
    inside, loose = False, []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if render.START.match(line + "\n"):
            inside = True
        elif line.startswith(render.END):
            inside = False
        elif line.startswith("|") and not inside:
            loose.append(f"{page.name}:{number}: {line[:60]}")
    assert loose == [], "a table outside the markers is not drawn from a JSON"


def test_every_table_line_names_its_command_commit_cpu_and_date(results):
    for name, fn in render.TABLES.items():
        text = fn(results)
        line = text.rsplit("\n", 1)[-1]
        assert line.startswith(("Source", "Records")), name
        for field in ("command", "commit", "CPU"):
            assert field in line, (name, field)


def test_a_field_a_json_lacks_is_not_recorded():
    line = render.described({"git": "abc1234", "cpu_model": "AMD EPYC"})
    assert "command not recorded" in line
    assert "commit `abc1234`" in line
    assert "CPU AMD EPYC" in line
    assert "date not recorded" in line
    assert render.described({}).count(render.NOT_RECORDED) == 4


def test_a_changed_number_in_a_json_fails(results):
    """Plant a number in a JSON (as an override of the file): the page no longer equals."""
    data = copy.deepcopy(results("asktell.json"))
    step = next(x for x in data["results"] if x["variant"] == "step" and x["d"] == 100_000)
    step["median_s"] *= 2
    planted = render.Results(overrides={"asktell.json": data})
    text = (ROOT / "docs" / "results" / "speed.md").read_text()
    assert render.render_text(text, planted) != text
    assert render.render_text(text, results) == text


def test_a_changed_number_in_the_page_fails(results):
    text = USER_PAGE.read_text()
    match = re.search(r"\| 0\.\d\d\d \[0\.\d\d\d, 0\.\d\d\d\] \|", text)  # countdown's cells
    assert match
    planted = text[: match.start()] + "| 0.999" + text[match.start() + 7 :]
    assert render.render_text(planted, results) != planted
    assert render.render_text(planted, results) == text


def test_a_table3_record_with_a_changed_curve_fails(results):
    """Table 3 is computed by benchmarks/table3.py from the run records: a record planted with
    another evaluation changes the page."""
    name = "table3-seeds-15-20/inverted_pendulum.json"
    record = copy.deepcopy(results(name))
    for seed in record["seeds"]:  # a curve point: [env steps, eval return, ...]
        seed["curve"] = [[point[0], 0.0, *point[2:]] for point in seed["curve"]]
    planted = render.Results(overrides={name: record})
    text = USER_PAGE.read_text()
    assert render.render_text(text, planted) != text


def test_an_unknown_table_or_an_open_marker_is_an_error(results):
    with pytest.raises(render.PageError, match="no table named 'nope'"):
        render.render_text("<!-- table: nope -->\n<!-- /table -->\n", results, "x.md")
    with pytest.raises(render.PageError, match="has no"):
        render.render_text("<!-- table: install -->\ntext\n", results, "x.md")


def test_check_names_no_page_when_they_agree(results):
    assert render.stale(results) == []


# Links: the pages moved (issue 63); every link to them, and from them, must land.

LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def slug(title: str) -> str:
    """GitHub-style anchor of a heading, as myst's `github_slugify` makes it."""
    text = re.sub(r"[`*]", "", title.strip())
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", text.lower().replace(" ", "-"))


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


LINKING = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "results").glob("*.md")),
]


@pytest.mark.parametrize("page", LINKING, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_to_and_from_the_results_pages_land(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if "://" in target or target.startswith(("mailto:", "#")):
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve()
        moved = {"benchmarks.md", "research-log.md", "speed.md", "learning.md"}
        if path.name not in moved and page.parent.name != "results":
            continue  # other links are the docs build's to check
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == []
