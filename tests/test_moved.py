"""Old import paths (``jaxes._moved.MOVED``): each warns, naming its new module and the date it
goes, and gives the new module's object; nothing in the package imports one."""

import importlib
import re
import warnings
from pathlib import Path

import pytest
from test_layers import import_graph

import jaxes
from jaxes._moved import MOVED

SRC = Path(__file__).resolve().parents[1] / "src"


def _defined_names(module) -> list[str]:
    """The public names a module defines itself (not those it imports)."""
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    ]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_with_the_new_path_and_the_date_and_gives_the_same_object(old):
    new, date = MOVED[old]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)
    target = importlib.import_module(new)
    names = _defined_names(target)
    assert names, f"{new} defines no public name"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shim = importlib.import_module(old)  # importing alone does not warn
    for name in names:
        with pytest.warns(DeprecationWarning) as caught:
            value = getattr(shim, name)
        assert value is getattr(target, name)
        message = str(caught[0].message)
        assert message == f"{old} is deprecated and goes on {date}: import {name} from {new}"
        assert caught[0].filename == __file__  # the warning points at the reader


def test_an_imported_name_is_sent_to_its_one_home():
    with pytest.warns(DeprecationWarning, match=r"import LowRank from jaxes\.factored\.lowrank$"):
        from jaxes.noise.factors import LowRank
    assert LowRank is jaxes.factored.lowrank.LowRank is jaxes.noise.LowRank


def test_a_name_the_new_module_lacks_is_an_attribute_error_without_a_warning():
    shim = importlib.import_module("jaxes.low_rank")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="'jaxes.low_rank' has no attribute 'nope'"):
            shim.nope  # noqa: B018
        assert not hasattr(shim, "__test__")  # what doctest and pytest probe for


def test_every_old_path_is_a_shim_and_nothing_in_the_package_imports_one():
    graph = import_graph()
    for old in MOVED:
        assert set(graph[old]) == {"jaxes._moved"}, f"{old} is more than a shim"
    importers = {m: sorted(set(t) & set(MOVED)) for m, t in graph.items() if set(t) & set(MOVED)}
    assert importers == {}
    # Nor by a string (importlib): only _moved names them.
    for path in (SRC / "jaxes").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        if name == "jaxes._moved" or name in MOVED:
            continue
        for old in MOVED:
            assert f'"{old}"' not in path.read_text(), f"{name} names {old}"


def test_the_factored_package_imports_its_members_on_first_use():
    assert jaxes.factored.__all__ == ["apply", "evaluate", "matmul", "member"]
    for name in jaxes.factored.__all__:
        assert getattr(jaxes.factored, name) is getattr(jaxes.factored.members, name)
        assert name in dir(jaxes.factored)
    assert "jaxes.factored.members" not in import_graph()["jaxes.factored"]  # not eagerly
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        jaxes.factored.nope  # noqa: B018
