"""Which files need the exact (replayed) analysis for the rules to be right.

Importing torch costs ~3 s and replay costs per op. Replay only changes an answer where a
tensor has literal sizes (`torch.zeros(2, 3)` and what is computed from it: the symbolic
pass marks those storages in `Analysis.sized_storages`), and only where such a tensor
reaches something a rule decides from its exact layout:

- a `view` / `reshape` / `flatten` / `ravel` of a tensor not known to be contiguous (SL101,
  SL103);
- a conv-like layer or `F.conv*` / `F.linear` (SL102);
- a call of the file's own functions or modules, whose body is then followed with those
  sizes (every rule, inside that body).

Everything else, symbolic sizes included, is decided by the stride algebra in both passes
alike, so `check`, the language server and `explain` agree on the file whatever else it
contains (tests/lsp/test_check_lsp_agree.py).
"""

from __future__ import annotations

import ast

from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import ClassInfo, InstanceValue, ModuleValue, TorchRef
from stridelens.server.rules.shared.ast_index import index_of, walk

_LAYOUT_CALLS = frozenset({"view", "reshape", "reshape_as", "flatten", "ravel"})
_CONV_LIKE = frozenset({"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "linear"})
_CONV_LIKE_MODULES = frozenset({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Linear"})


def needs_replay(analysis: Analysis) -> bool:
    """True when replaying `analysis`'s file on meta tensors may change a rule's answer."""
    keys = analysis.sized_storages
    if not keys:
        return False
    index = index_of(analysis)
    if not index.imports_torch:
        return False
    for name, calls in index.by_name.items():
        for call in calls:
            if _matters(analysis, call, name, keys):
                return True
    return False


def _sized(analysis: Analysis, node: ast.expr, keys: set[int]) -> bool:
    fact = analysis.fact_of(node)
    return fact is not None and fact.storage_key in keys


def _matters(analysis: Analysis, call: ast.Call, name: str, keys: set[int]) -> bool:
    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
    operands = [a.value if isinstance(a, ast.Starred) else a for a in call.args] + [k.value for k in call.keywords]
    if name in _LAYOUT_CALLS:
        subject = receiver if receiver is not None and analysis.fact_of(receiver) is not None else (operands[0] if operands else None)
        fact = analysis.fact_of(subject) if subject is not None else None
        # A contiguous input views and reshapes without copying: nothing to replay.
        return fact is not None and fact.storage_key in keys and fact.contiguous is not True
    if not any(_sized(analysis, op, keys) for op in operands):
        return False
    callee = analysis.value_of(call.func)
    if isinstance(callee, TorchRef):
        return callee.path.rpartition(".")[2] in _CONV_LIKE
    if isinstance(callee, ModuleValue):
        return callee.name in _CONV_LIKE_MODULES
    if isinstance(callee, (InstanceValue, ClassInfo)):
        return True  # `model(x)` of one of the file's modules
    if receiver is not None:
        # `self.block(x)`, `model.decode(z)`: a method of the file's own classes.
        return isinstance(analysis.value_of(receiver), InstanceValue)
    return isinstance(call.func, ast.Name) and call.func.id in _own_definitions(analysis)


def _own_definitions(analysis: Analysis) -> frozenset[str]:
    names = getattr(analysis, "_own_definitions", None)
    if names is None:
        names = frozenset(
            n.name for n in walk(analysis.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        )
        analysis._own_definitions = names  # type: ignore[attr-defined]
    return names  # type: ignore[no-any-return]
