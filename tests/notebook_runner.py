"""Runs a notebook top to bottom in quick mode and returns the text it printed.

A notebook must run from any working directory (it imports only installed packages and reads
no path relative to itself): ``run_notebook`` starts the kernel in the repository root unless
told otherwise, and the slow notebooks' tests run theirs from ``notebooks/``, so both are
exercised without running any notebook twice.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from helpers import NUMBER, number  # noqa: F401  (the notebooks' tests read numbers with them)
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def run_notebook(
    name: str, timeout: int = 600, cwd: Path = ROOT
) -> tuple[str, nbformat.NotebookNode]:
    """Executes ``notebooks/<name>`` (``JAXES_QUICK=1``) in a fresh kernel whose working
    directory is ``cwd`` (the repository root by default).

    Returns every stream and text/plain output joined by newlines, and the executed notebook
    (for checking images). A failing cell raises ``nbclient.exceptions.CellExecutionError``
    with the cell's traceback.
    """
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    os.environ["JAXES_QUICK"] = "1"  # the kernel inherits this process's environment
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append(out.get("text", ""))
            elif "data" in out and "text/plain" in out["data"]:
                texts.append(out["data"]["text/plain"])
    return "\n".join(texts), nb


def images(nb: nbformat.NotebookNode) -> int:
    """How many PNG or SVG images the executed notebook displayed."""
    return sum(
        1
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "data" in out and ({"image/png", "image/svg+xml"} & set(out["data"]))
    )
