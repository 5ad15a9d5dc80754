"""stridelens: PyTorch's memory model, visible in the editor.

The code lives in `stridelens.server` (static analysis, rules, LSP, CLI) and
`stridelens.inspector` (runtime probe and debugpy client).
"""

__version__ = "0.1.0"
