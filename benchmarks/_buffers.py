"""Where a compiled program's temporary bytes go: the largest values XLA placed in its
preallocated temp buffer, each with the JAX operation that made it.

`memory_analysis()` gives totals only; XLA writes its buffer assignment, value by value, to
the files `--xla_dump_to` asks for. `enable` asks for them (before JAX starts its backend);
`largest_temps` reads a dumped program's back. Nothing here imports JAX.

Example:
  >>> text = '''allocation 3: size 96, preallocated-temp:
  ...  value: <7 dot.1 @0> (size=64,offset=0): f32[4,4]{1,0}
  ...  value: <8 add.2 @0> (size=32,offset=64): f32[8]{0}
  ... '''
  >>> hlo = '%dot.1 = f32[4,4]{1,0} dot(%a, %b), metadata={op_name="jit(f)/dot_general"}'
  >>> [(v["bytes"], v["op_name"]) for v in temp_values(text, hlo)]
  [(64, 'jit(f)/dot_general'), (32, '')]
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_VALUE = re.compile(r"value: <\d+ (\S+) @\d+> \(size=(\d+),offset=(\d+)\): (\S+)")
_OP_NAME = re.compile(r"%(\S+) = [^\n]*?op_name=\"([^\"]*)\"")


def enable(directory: str | Path) -> None:
    """Dump every program compiled from now on to ``directory`` (XLA reads ``XLA_FLAGS`` when
    JAX starts its backend, so call this first)."""
    flags = f"--xla_dump_to={directory} --xla_dump_hlo_as_text"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()


def temp_values(assignment: str, hlo: str) -> list[dict]:
    """The values of the preallocated temp allocation in a buffer-assignment dump, largest
    first, with the ``op_name`` of the instruction that defines each (from the program's HLO
    text after optimizations; empty when it has none)."""
    start = assignment.index("preallocated-temp")
    block = assignment[start:]
    end = block.find("\nallocation ")
    block = block if end < 0 else block[:end]
    op_names = dict(_OP_NAME.findall(hlo))  # one pass over the program, not one per value
    values = [
        {
            "bytes": int(size),
            "offset": int(offset),
            "shape": shape,
            "instruction": name,
            "op_name": op_names.get(name, ""),
        }
        for name, size, offset, shape in _VALUE.findall(block)
    ]
    return sorted(values, key=lambda v: -v["bytes"])


def largest_temps(directory: str | Path, function: str, count: int) -> list[dict]:
    """The ``count`` largest temp values of the newest program dumped for the jitted function
    named ``function``."""
    suffix = "cpu_after_optimizations"
    found = sorted(Path(directory).glob(f"module_*.jit_{function}.{suffix}-buffer-assignment.txt"))
    if not found:
        raise FileNotFoundError(f"no buffer assignment of jit_{function} under {directory}")
    assignment = found[-1]
    hlo = assignment.with_name(assignment.name.replace("-buffer-assignment", ""))
    return temp_values(assignment.read_text(), hlo.read_text())[:count]
