"""Which files need the exact (replayed) analysis for the rules to be right.

Importing torch costs ~3 s and replay costs per op, while only SL101 and SL103 depend on
exact layouts (torch's own verdict on a `view`/`reshape`). The symbolic pass already keeps
storage identity through views, so a file needs replay only when some `view`/`reshape`
receives a tensor whose storage was created by a torch factory with literal-looking sizes
(constants or names): elsewhere the replay could not know the sizes either and would give
the same (silent) answer.
"""

from __future__ import annotations

import ast

from stridelens.server.analysis import Analysis
from stridelens.server.analysis.torch_api import FACTORIES
from stridelens.server.rules._helpers import index_of, torch_path

_LAYOUT_CALLS = ("view", "reshape", "reshape_as", "flatten", "ravel")


def _literal_ish(node: ast.expr) -> bool:
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_literal_ish(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _literal_ish(node.operand)
    if isinstance(node, ast.BinOp):
        return _literal_ish(node.left) and _literal_ish(node.right)
    return isinstance(node, ast.Attribute)  # torch.float16, cfg.dim


def needs_replay(analysis: Analysis) -> bool:
    """True when replaying `analysis`'s file on meta tensors may change a rule's answer."""
    index = index_of(analysis)
    if not index.imports_torch:
        return False
    if not any(index.by_name.get(name) for name in _LAYOUT_CALLS):
        return False
    keys: set[int] = set()
    for name in FACTORIES:
        for call in index.by_name.get(name, ()):
            path = torch_path(analysis, call.func)
            if path is None or path.rsplit(".", 1)[-1] not in FACTORIES or not call.args:
                continue
            if not all(_literal_ish(a) for a in call.args):
                continue
            fact = analysis.fact_of(call)
            if fact is not None and fact.storage_key is not None:
                keys.add(fact.storage_key)
    if not keys:
        return False
    for name in _LAYOUT_CALLS:
        for call in index.by_name.get(name, ()):
            receiver = call.func.value if isinstance(call.func, ast.Attribute) else (call.args[0] if call.args else None)
            if receiver is None:
                continue
            fact = analysis.fact_of(receiver)
            if fact is not None and fact.storage_key in keys:
                return True
    return False
