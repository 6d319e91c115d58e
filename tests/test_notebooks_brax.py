"""The Brax and multi-device notebooks run top to bottom in quick mode and print what they claim."""

import os
import re

import pytest
from notebook_runner import images, number, run_notebook

FORCED_DEVICES = r"--xla_force_host_platform_device_count=\d+"


@pytest.fixture
def fresh_kernel_env(monkeypatch):
    """The environment of a user's fresh kernel: no fake CPU devices.

    conftest gives this process 4 devices through ``XLA_FLAGS``, which the kernel would
    inherit; 04_devices.ipynb must set them up itself.
    """
    flags = re.sub(FORCED_DEVICES, "", os.environ.get("XLA_FLAGS", "")).strip()
    if flags:
        monkeypatch.setenv("XLA_FLAGS", flags)
    else:
        monkeypatch.delenv("XLA_FLAGS", raising=False)


def html_outputs(nb) -> list[str]:
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            html = out.get("data", {}).get("text/html")
            if html:
                found.append(html if isinstance(html, str) else "".join(html))
    return found


@pytest.mark.slow
def test_brax_notebook_trains_the_pendulum_and_shows_curve_and_replay(fresh_kernel_env):
    text, nb = run_notebook("03_brax.ipynb")
    assert number(r"final noise-free eval return:", text) >= 950
    assert number(r"best eval return:", text) >= 950
    assert re.search(r"replay of generation 80: \d+ steps, return", text)
    assert images(nb) >= 1  # the learning curve
    # Brax's viewer, self-contained: its scripts are embedded, nothing is fetched.
    pages = [h for h in html_outputs(nb) if "Brax visualizer" in h]
    assert pages and all("https://" not in h and "data:text/javascript" in h for h in pages)
    # The hopper settings are shown as the equivalent command, not run in quick mode.
    assert "jaxes train --env hopper --population 4096" in text
    assert "--policy mlp --hidden-sizes 64,64" in text
    assert "hopper: not run here (QUICK=True" in text


@pytest.mark.slow
def test_devices_notebook_matches_one_device_and_moves_no_parameters(fresh_kernel_env):
    text, _ = run_notebook("04_devices.ipynb")
    assert number(r"(?m)^devices:", text) == 4
    assert number(r"max \|params\(trained\) - params\(start\)\|:", text) > 1e-3
    assert number(r"(?m)^max \|params\(1 device\) - params\(4 devices\)\|:", text) <= 1e-5
    match = re.search(r"largest collective: (\d+) values; parameters: (\d+)", text)
    assert match, text[-3000:]
    largest, n_params = int(match.group(1)), int(match.group(2))
    assert n_params == 1249
    assert largest * 10 <= n_params
    assert re.search(r"all-gather\s+16 values", text)  # the P fitness values
    # With observation normalisation the runs are only close; the notebook says so and shows it.
    assert "normalised: max |params(1 device) - params(4 devices)|:" in text
