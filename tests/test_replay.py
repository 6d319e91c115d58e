"""The Brax replay page made self-contained: nothing remote left, and it draws with no network."""

import base64
import contextlib
import io
import json
import re
import shutil
import subprocess
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxes.tasks.brax import load_env
from jaxes.tasks.brax.offline_page import self_contained

REMOTE = r"(?:https?:)?//[^\s\"'<>)]+"
IMPORTMAP = re.compile(r"""<script\s+type=["']importmap["']\s*>(.*?)</script>""", re.S)
IMPORT = re.compile(r"""^\s*(?:(?:import|export)\b[^;'"]*?\bfrom\s*|import\s*)["']([^"']+)""", re.M)
VIEW_HEIGHT = 480  # brax.io.html.render's default height for the 3-D view, in CSS pixels


def remote_references(page: str) -> list[str]:
    """Remote URLs in src/href attributes, import statements and the import map of ``page``."""
    refs = re.findall(rf"""\b(?:src|href)\s*=\s*["']?({REMOTE})""", page, re.I)
    refs += [s for s in IMPORT.findall(page) if re.match(REMOTE, s)]
    for block in IMPORTMAP.findall(page):
        refs += [u for u in json.loads(block)["imports"].values() if re.match(REMOTE, u)]
    return refs + re.findall(r"https?://[^\s\"'<>)]+", page)


@pytest.fixture(scope="module")
def brax_page():
    """Brax's own replay page (CDN scripts) for four steps of inverted_pendulum."""
    env = load_env("inverted_pendulum")
    env_state = jax.jit(env.reset)(jax.random.key(0))
    step = jax.jit(env.step)
    states = [env_state.pipeline_state]
    for _ in range(4):
        env_state = step(env_state, jnp.zeros(env.action_size))
        states.append(env_state.pipeline_state)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        from brax.io import html

        return html.render(env.sys.tree_replace({"opt.timestep": env.dt}), states)


@pytest.fixture(scope="module")
def offline_page(brax_page):
    return self_contained(brax_page)


def test_nothing_remote_is_left(brax_page, offline_page):
    assert len(remote_references(brax_page)) >= 5  # the check can fail: brax's page is remote
    assert remote_references(offline_page) == []
    assert 'id="brax-viewer"' in offline_page and offline_page.count("<script") >= 4
    assert self_contained(offline_page) == offline_page  # a second pass changes nothing


def test_embedded_modules_import_only_what_the_import_map_names(offline_page):
    (block,) = IMPORTMAP.findall(offline_page)
    imports = json.loads(block)["imports"]
    assert {"three", "lilgui", "viewer"} <= set(imports)
    prefix = "data:text/javascript;base64,"
    assert all(url.startswith(prefix) for url in imports.values())
    sources = [base64.b64decode(url[len(prefix) :]).decode() for url in imports.values()]
    # A data: module has no base URL, so a relative import in one would not resolve.
    for spec in IMPORT.findall(offline_page) + [s for src in sources for s in IMPORT.findall(src)]:
        assert spec in imports, spec


@pytest.mark.parametrize(
    "old, new, named",
    [
        ("</body>", '<script src="https://cdn.example.com/extra.js"></script></body>', "extra.js"),
        ("</head>", '<link rel="stylesheet" href="//cdn.example.com/a.css"></head>', "a.css"),
        ("three@0.150.1/build", "three@0.160.0/build", "three@0.160.0"),  # a brax upgrade
        ("import {Viewer} from 'viewer';", "import {Viewer} from 'viewer2';", "viewer2"),
    ],
)
def test_unknown_remote_resources_are_refused(brax_page, old, new, named):
    assert old in brax_page
    with pytest.raises(ValueError, match=re.escape(named)):
        self_contained(brax_page.replace(old, new, 1))


def find_chromium():
    names = ("chromium", "chromium-browser", "google-chrome", "headless_shell")
    return next(filter(None, map(shutil.which, names)), None)


def screenshot(chromium, page: str, tmp_path, name: str) -> np.ndarray:
    """The page as headless Chromium draws it with every network fetch failing, as RGB floats."""
    image = pytest.importorskip("matplotlib.image")
    html, png = tmp_path / f"{name}.html", tmp_path / f"{name}.png"
    html.write_text(page)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader",  # WebGL on the CPU, as on a machine without a GPU
        "--proxy-server=127.0.0.1:9",  # nothing listens there, and no name resolves:
        "--host-resolver-rules=MAP * ~NOTFOUND",  # any remote fetch fails, as offline
        f"--user-data-dir={tmp_path / f'{name}-profile'}",
        "--window-size=800,600",
        "--virtual-time-budget=5000",
        f"--screenshot={png}",
    ]
    proc = subprocess.run(
        [chromium, *flags, html.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and png.exists(), proc.stderr[-2000:]
    return image.imread(png)[..., :3]


def drawn(shot: np.ndarray) -> bool:
    """Whether the 3-D view filled its area and shows a scene (not a blank or flat page)."""
    view = shot[:VIEW_HEIGHT]
    centre = (view[120:360, 200:600] * 255).round().astype(np.uint8).reshape(-1, 3)
    return (view.min(-1) < 0.98).mean() > 0.5 and len(np.unique(centre, axis=0)) > 20


def test_replay_draws_with_no_network(brax_page, offline_page, tmp_path):
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium found (install with `apt-get install chromium`)")
    assert drawn(screenshot(chromium, offline_page, tmp_path, "offline"))
    # The same flags leave Brax's own page blank: the check sees a missing network.
    assert not drawn(screenshot(chromium, brax_page, tmp_path, "brax"))
