"""Which files need the exact (replayed) analysis for the rules to be right.

Importing torch costs ~3 s and replay costs per op, while only SL101 and SL103 depend on
exact layouts (torch's own verdict on a `view`/`reshape`). The symbolic pass keeps storage
identity through views and marks the storages whose sizes an exact pass would know
(`Analysis.sized_storages`: literal factory sizes, and results computed only from such
tensors), so a file needs replay only when some `view`/`reshape` receives one of those:
elsewhere replay could not know the sizes either and would give the same (silent) answer.
"""

from __future__ import annotations

import ast

from stridelens.server.analysis import Analysis
from stridelens.server.rules._helpers import index_of

_LAYOUT_CALLS = ("view", "reshape", "reshape_as", "flatten", "ravel")


def needs_replay(analysis: Analysis) -> bool:
    """True when replaying `analysis`'s file on meta tensors may change a rule's answer."""
    index = index_of(analysis)
    if not index.imports_torch:
        return False
    if not any(index.by_name.get(name) for name in _LAYOUT_CALLS):
        return False
    keys = analysis.sized_storages
    if not keys:
        return False
    for name in _LAYOUT_CALLS:
        for call in index.by_name.get(name, ()):
            receiver = call.func.value if isinstance(call.func, ast.Attribute) else (call.args[0] if call.args else None)
            if receiver is None:
                continue
            fact = analysis.fact_of(receiver)
            # A contiguous input views and reshapes without copying: nothing to replay.
            if fact is not None and fact.storage_key in keys and fact.contiguous is not True:
                return True
    return False
