"""The one-line progress display of a training run."""

from __future__ import annotations

import sys
from typing import TextIO


def notebook_line(stream: TextIO):
    """An updatable display of one line in a Jupyter notebook (``IPython.display``'s handle)
    when ``stream`` is the notebook's stdout, else ``None``: in a notebook, where nothing is a
    terminal, the progress line would otherwise print once per block."""
    ipython = sys.modules.get("IPython")
    if stream is not sys.stdout or ipython is None:
        return None
    shell = ipython.get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return None
    from IPython import display

    return display.display(display.Pretty(""), display_id=True)


class Progress:
    """One status line: generation, returns, env steps/s, ETA. Redrawn in place on a terminal,
    and in a notebook (``notebook_line``).

    ``statistic`` names what the returns are when they summarise several runs (e.g.
    ``"median over 3 seeds"``); the line shows it before them.

    Example:
      >>> import io
      >>> out = io.StringIO()
      >>> Progress(10, out).update(5, {"fitness_mean": 1.0, "best_fitness": 2.0}, 100.0, 3.0)
      >>> out.getvalue().split()[:3]
      ['gen', '5/10', 'mean']
      >>> out = io.StringIO()
      >>> Progress(10, out, "median over 3 seeds").update(5, {}, 100.0, 3.0)
      >>> out.getvalue().split()[:7]
      ['gen', '5/10', 'median', 'over', '3', 'seeds:', 'mean']
    """

    def __init__(self, total: int, stream: TextIO | None = None, statistic: str | None = None):
        self.total = total
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.label = f"{statistic}: " if statistic else ""
        self.notebook = notebook_line(self.stream)

    def update(self, generation: int, line: dict, steps_per_s: float, eta_s: float) -> None:
        def number(value):
            return "     n/a" if value is None else f"{value:9.2f}"

        text = (
            f"gen {generation:>5}/{self.total}  {self.label}"
            f"mean {number(line.get('fitness_mean'))}  "
            f"best {number(line.get('best_fitness'))}  eval {number(line.get('eval_return'))}  "
            f"{steps_per_s:,.0f} steps/s  ETA {eta_s:5.0f}s"
        )
        if self.notebook is not None:
            from IPython.display import Pretty

            self.notebook.update(Pretty(text))
            return
        self.stream.write(("\r" + text) if self.tty else (text + "\n"))
        self.stream.flush()

    def note(self, text: str) -> None:
        """``text`` on a line of its own (below the progress line, which goes on after it)."""
        self.stream.write(("\n" + text + "\n") if self.tty else (text + "\n"))
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
