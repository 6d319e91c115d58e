"""What a newcomer reads first (issue 63): the README's install lines for a package that is not
on PyPI (from a checkout and from the repository's URL), and the plot extra named wherever the
docs list a run's learning curve."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
)
# The pages a user reads: the README and docs/ (the docs site's too).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def install_commands() -> list[str]:
    """The shell lines of the README's Install section, comments dropped."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]


def test_the_readme_installs_from_a_checkout_and_from_the_repository_url():
    commands = install_commands()
    pips = [c for c in commands if c.startswith("pip install")]
    # Not on the index: no `pip install jaxes` or `pip install 'jaxes[brax]'`.
    assert not [c for c in pips if re.fullmatch(r"pip install ['\"]?jaxes(\[[\w,]+\])?['\"]?", c)]
    assert "pip install ." in pips and "pip install '.[brax]'" in pips
    assert any(c.startswith("pip install -e ") for c in pips)
    url = [c for c in pips if " @ git+" in c]
    assert url and all(re.search(r"jaxes(\[[\w,]+\])? @ git\+", c) for c in url), url
    named = {x for c in pips for group in re.findall(r"\[([\w,]+)\]", c) for x in group.split(",")}
    assert named and named <= EXTRAS, named - EXTRAS


def test_every_page_listing_the_learning_curve_names_the_plot_extra():
    """A run writes learning_curve.png (learning_curves.png for several seeds) only with the
    plot extra: each table row or paragraph that lists one says so."""
    listed = 0
    for page in PAGES:
        for block in re.split(r"\n\s*\n|\n(?=\|)", page.read_text()):
            if re.search(r"learning_curves?\.png", block):
                listed += 1
                assert "plot" in block, f"{page.name}: {block.strip()[:200]}"
    assert listed >= 3
