"""Brax's HTML replay page made self-contained, so it shows on a machine without network access.

``brax.io.html.render`` returns a page that loads three.js, lil-gui, pako and Brax's own viewer
from CDNs. :func:`self_contained` swaps each for a copy shipped in ``jaxes/viewer_assets/``
(sources, versions and licences in its README.md), embedded in the page as a ``data:`` URL.
"""

from __future__ import annotations

import base64
import json
import re
from importlib import resources
from urllib.parse import urljoin

_ASSETS = resources.files("jaxes.tasks.brax") / "viewer_assets"
_VIEWER = "https://cdn.jsdelivr.net/gh/google/brax@v0.14.2/brax/visualizer/js/"

# Every remote file brax 0.14.2's page loads, directly or through an import, and the shipped copy
# standing in for it. The URLs are exact, versions included: after a brax upgrade the page names
# other versions, and failing then beats pairing a new page with an old viewer.
_SHIPPED = {
    "https://unpkg.com/three@0.150.1/build/three.module.js": "three.module.js",
    "https://unpkg.com/three@0.150.1/examples/jsm/controls/OrbitControls.js": "OrbitControls.js",
    # jsDelivr's "+esm" is its minified build of the package's ES module entry point.
    "https://cdn.jsdelivr.net/npm/lil-gui@0.18.0/+esm": "lil-gui.esm.min.js",
    "https://unpkg.com/pako@2.1.0/dist/pako.min.js": "pako.min.js",
    **{_VIEWER + name: name for name in ("viewer.js", "animator.js", "selector.js", "system.js")},
}
# An import-map polyfill for browsers older than 2023 (Chrome 89, Firefox 108, Safari 16.4); in a
# browser with native import maps it does nothing, so it is left out rather than shipped.
_DROPPED = {"https://unpkg.com/es-module-shims@1.6.3/dist/es-module-shims.js"}

_REMOTE = r"(?:https?:)?//"
_IMPORTMAP = re.compile(r"""<script\s+type=["']importmap["']\s*>(.*?)</script>""", re.S | re.I)
_MODULE_SCRIPT = re.compile(r"""(<script\s+type=["']module["']\s*>)(.*?)(</script>)""", re.S | re.I)
_REMOTE_SCRIPT = re.compile(
    rf"""<script\b[^>]*?\bsrc=["']({_REMOTE}[^"']*)["'][^>]*>\s*</script>\s*""", re.I
)
_REMOTE_ATTR = re.compile(rf"""\b(?:src|href)\s*=\s*["']?({_REMOTE}[^"'\s>]*)""", re.I)
# Static imports and re-exports at the start of a line: the only form the shipped files use
# (three.module.js and lil-gui import nothing), so a regex suffices and no JS parser is needed.
_IMPORT = re.compile(
    r"""^(\s*(?:(?:import|export)\b[^;'"]*?\bfrom\s*|import\s*))(["'])([^"'\n]+)\2""", re.M
)
_URL_LIKE = re.compile(r"(?:[a-z][a-z0-9+.-]*:|/|\./|\.\./)", re.I)


def _embedded(url: str, what: str, rewrite=lambda source: source) -> str:
    if url not in _SHIPPED:
        raise ValueError(f"self_contained: no shipped copy of {url!r} ({what})")
    name = _SHIPPED[url]
    source = rewrite((_ASSETS / name).read_text())
    # base64, not percent-encoding: Chromium caps URLs at 2 MiB and three.js is 1.2 MB of text.
    return "data:text/javascript;base64," + base64.b64encode(source.encode()).decode("ascii")


def _remote_imports(maps: list[str]) -> dict:
    """The page's import map (``maps``: at most one), each remote entry checked to have a
    shipped copy."""
    if len(maps) > 1:
        raise ValueError(f"self_contained: expected at most one import map, found {len(maps)}")
    remote = json.loads(maps[0]) if maps else {"imports": {}}
    if set(remote) != {"imports"}:
        raise ValueError(f"self_contained: unrecognised import map keys {sorted(remote)}")
    remote = remote["imports"]
    for spec, url in remote.items():
        # A "dir/" entry maps a whole folder; only the files imported from it need shipping.
        folder = url.endswith("/") and any(u.startswith(url) for u in _SHIPPED)
        if not (url in _SHIPPED or folder or url.startswith("data:")):
            raise ValueError(f"self_contained: no shipped copy of {url!r} (import map {spec!r})")
    return remote


def self_contained(page: str) -> str:
    """``page`` (from ``brax.io.html.render``) with its CDN scripts and imports embedded.

    Modules load from ``data:`` URLs that the page's import map names. A ``data:`` module has no
    base URL for relative imports (the viewer's ``'./animator.js'``), so those are rewritten to
    bare names (``'viewer_assets/animator.js'``) that the import map lists too. Raises
    ``ValueError`` naming any remote reference it has no shipped copy for.

    Example:
      >>> page = '<script src="https://unpkg.com/pako@2.1.0/dist/pako.min.js"></script>'
      >>> self_contained(page)[:44]
      '<script src="data:text/javascript;base64,Lyo'
      >>> self_contained('<script src="https://example.com/x.js"></script>')
      Traceback (most recent call last):
        ...
      ValueError: self_contained: no shipped copy of 'https://example.com/x.js' (a script src)
    """
    maps = _IMPORTMAP.findall(page)
    remote = _remote_imports(maps)

    def resolve(spec: str, base: str | None) -> str | None:
        """The remote URL ``spec`` names when imported from ``base``; None if not remote."""
        if spec in remote:
            return remote[spec]
        folders = [k for k in remote if k.endswith("/") and spec.startswith(k)]
        if folders:
            folder = max(folders, key=len)
            return remote[folder] + spec[len(folder) :]
        if not _URL_LIKE.match(spec):
            raise ValueError(f"self_contained: import {spec!r} is not in the page's import map")
        url = urljoin(base or "", spec)
        return url if re.match(_REMOTE, url) else None

    # The new import map; data: entries come from an earlier pass over the same page.
    imports = {spec: url for spec, url in remote.items() if url.startswith("data:")}
    pending: list[tuple[str, str, str]] = []  # (import-map name, URL, specifier) to embed

    def rewrite(base: str | None):
        def one(match: re.Match) -> str:
            head, quote, spec = match.groups()
            url = resolve(spec, base)
            if url is None:  # a page-local file: nothing to fetch remotely
                return match[0]
            name = "viewer_assets/" + _SHIPPED.get(url, spec) if _URL_LIKE.match(spec) else spec
            pending.append((name, url, spec))
            return head + quote + name + quote

        return lambda source: _IMPORT.sub(one, source)

    page = _MODULE_SCRIPT.sub(lambda m: m[1] + rewrite(None)(m[2]) + m[3], page)
    while pending:
        name, url, spec = pending.pop()
        if name not in imports:
            imports[name] = _embedded(url, f"import {spec!r}", rewrite(url))
    if maps:
        new_map = json.dumps({"imports": imports}, indent=2)
        page = _IMPORTMAP.sub(lambda m: f'<script type="importmap">\n{new_map}\n</script>', page)

    def script(match: re.Match) -> str:
        if match[1] in _DROPPED:
            return ""
        return match[0].replace(match[1], _embedded(match[1], "a script src"))

    page = _REMOTE_SCRIPT.sub(script, page)
    # Anything still remote (a stylesheet, an icon, a URL in a script) is beyond this mapping.
    left = _REMOTE_ATTR.findall(page) + re.findall(r"https?://[^\s\"'<>)]*", page)
    if left:
        raise ValueError(f"self_contained: unrecognised remote reference(s) {sorted(set(left))}")
    return page
