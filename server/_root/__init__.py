"""stridelens: PyTorch's memory model, visible in the editor.

The code lives in `stridelens.server` (static analysis, rules, LSP, CLI) and
`stridelens.inspector` (runtime probe and debugpy client).
"""

from typing import Any

__version__ = "0.1.0"


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext stridelens`: the `%stridelens` magic (README "Notebooks"). IPython is imported
    only by the module loaded here, so it is no dependency of stridelens."""
    from stridelens.inspector.notebook_magics import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from stridelens.inspector.notebook_magics import unload

    unload(ipython)
