"""Code action "Write a gradcheck test" on a class that subclasses `torch.autograd.Function`.

The action creates `test_<module>_<class>_gradcheck.py` next to the module: it imports the
Function (by its dotted name from above the packages the module is in) and runs `torch.autograd.gradcheck` on `Function.apply` in float64 with small random
inputs. Each input's shape is the one the static analysis knows at a `<Class>.apply(...)` call
in the same file (the first call whose argument is a tensor fact); a dimension known only by
name (`n`) and an input with no fact at all get a small stand-in, marked TODO in the test.
Literal non-tensor arguments at the call are passed as they are.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types

KIND = "source.stridelens.gradcheck"
STAND_IN_DIM = 4  # size used for a dimension the analysis does not know
STAND_IN_SHAPE = (3, 4)  # shape used for an input the analysis knows nothing of
LARGE_NUMEL = 4096  # gradcheck runs two forwards per input element: warn above this

_FUNCTION_BASES = ("torch.autograd.Function", "autograd.Function", "torch.autograd.function.Function",
                   "autograd.function.Function")


@dataclass
class Input:
    name: str
    code: str  # the Python expression that builds it
    note: str  # where its shape comes from


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _function_aliases(tree: ast.Module) -> set[str]:
    """Bare names bound to torch.autograd.Function by `from torch.autograd import Function`."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("torch.autograd", "torch.autograd.function"):
            out.update(a.asname or a.name for a in node.names if a.name == "Function")
    return out


def autograd_functions(tree: ast.Module) -> list[ast.ClassDef]:
    """Module-level Function subclasses (a nested class cannot be imported by the test)."""
    aliases = _function_aliases(tree)
    found = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = _dotted(base)
                if name is not None and (name in _FUNCTION_BASES or name in aliases):
                    found.append(node)
                    break
    return found


def _forward_params(cls: ast.ClassDef) -> list[str] | None:
    """Input names of forward (without ctx; torch >= 2 style with setup_context has none)."""
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    fwd = methods.get("forward")
    if fwd is None:
        return None
    args = [a.arg for a in fwd.args.posonlyargs + fwd.args.args]
    if "setup_context" not in methods and args:
        args = args[1:]  # ctx
    if fwd.args.vararg is not None:
        return None  # *args: the call site says how many
    return args


def _apply_calls(tree: ast.Module, cls_name: str) -> list[ast.Call]:
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "apply":
            owner = _dotted(node.func.value) or ""
            if owner == cls_name or owner.endswith("." + cls_name):
                calls.append(node)
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def _fact(values: dict[ast.AST, Any], node: ast.AST) -> Any:
    v = values.get(node)
    return v if v is not None and hasattr(v, "display_shape") else None


def _tensor_code(fact: Any) -> tuple[str, str]:
    """(expression, note) for a float64 tensor of the fact's shape, dims it lacks stood in."""
    shape = fact.display_shape
    if shape is None:
        dims, note = list(STAND_IN_SHAPE), f"TODO: shape unknown to the analysis, {STAND_IN_SHAPE} stands in"
    else:
        dims, unknown = [], []
        for d in shape:
            if isinstance(d, int):
                dims.append(d)
            else:
                dims.append(STAND_IN_DIM)
                unknown.append("?" if d is None else str(d))
        note = "shape known statically" if not unknown else (
            f"TODO: {', '.join(unknown)} not known statically, {STAND_IN_DIM} stands in")
    dtype = str(getattr(fact, "dtype", None) or "")
    if dtype and not (dtype.startswith("float") or dtype.startswith("complex") or dtype in ("half", "bfloat16",
                                                                                         "double")):
        # integer / bool inputs (indices, masks): no gradient flows into them
        return f"torch.zeros({_shape_text(dims)}, dtype=torch.{dtype})", note + f"; {dtype}, no grad"
    size = 1
    for d in dims:
        size *= d
    if size > LARGE_NUMEL:
        note += f"; {size:,} elements: gradcheck runs two forwards per element"
    return f"torch.randn({_shape_text(dims)}, dtype=torch.float64, requires_grad=True)", note


def _shape_text(dims: list[int]) -> str:
    return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"


def _inputs(cls: ast.ClassDef, tree: ast.Module, values: dict[ast.AST, Any]) -> list[Input]:
    params = _forward_params(cls)
    calls = _apply_calls(tree, cls.name)
    count = len(params) if params is not None else max((len(c.args) for c in calls), default=1)
    names = params if params is not None else [f"arg{i}" for i in range(count)]
    out: list[Input] = []
    for i, name in enumerate(names):
        chosen: Input | None = None
        for call in calls:
            if i >= len(call.args) or isinstance(call.args[i], ast.Starred):
                continue
            arg = call.args[i]
            if isinstance(arg, ast.Constant) and not isinstance(arg.value, bytes):
                chosen = Input(name, repr(arg.value), f"the literal at line {call.lineno}")
                break
            fact = _fact(values, arg)
            if fact is not None:
                code, note = _tensor_code(fact)
                chosen = Input(name, code, f"{note} (`{ast.unparse(arg)}` at line {call.lineno})")
                break
        if chosen is None:
            code = f"torch.randn({_shape_text(list(STAND_IN_SHAPE))}, dtype=torch.float64, requires_grad=True)"
            chosen = Input(name, code, f"TODO: no {cls.name}.apply call with a known tensor here; "
                                       f"{STAND_IN_SHAPE} stands in")
        out.append(chosen)
    return out


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_path(module_path: Path, cls_name: str) -> Path:
    return module_path.with_name(f"test_{module_path.stem}_{_snake(cls_name)}_gradcheck.py")


def dotted_module(module_path: Path) -> str:
    """The module's import name from the folder above every package (`__init__.py`) it is in,
    so its relative imports work: `mypkg.ops.sq`."""
    parts = [module_path.stem]
    folder = module_path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def test_source(module_path: Path, cls: ast.ClassDef, inputs: list[Input]) -> str:
    module = dotted_module(module_path)
    up = len(module.split(".")) - 1  # how many folders above the test the import root is
    root_expr = "Path(__file__).resolve().parent" + ".parent" * up
    args = "\n".join(f"        {i.code},  # {i.name}: {i.note}" for i in inputs)
    todo = ("; edit the\nlines marked TODO to match what the Function expects" if any("TODO" in i.note for i in inputs)
            else "")
    return f'''"""gradcheck for {cls.name} ({module_path.name}:{cls.lineno}), written by stridelens.

torch.autograd.gradcheck compares the backward of {cls.name} with finite differences, in
float64, on small random inputs (shapes from the static analysis where it knew them{todo}).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str({root_expr}))
from {module} import {cls.name}  # noqa: E402


def test_{_snake(cls.name)}_gradcheck() -> None:
    torch.manual_seed(0)
    inputs = (
{args}
    )
    assert torch.autograd.gradcheck({cls.name}.apply, inputs, eps=1e-6, atol=1e-4)
'''


def _path_of(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


def _importable(module_path: Path) -> bool:
    stem = module_path.stem
    return stem.isidentifier() and not keyword.iskeyword(stem)


def code_actions(uri: str, tree: ast.Module | None, values: dict[ast.AST, Any],
                 params: types.CodeActionParams) -> list[types.CodeAction]:
    """The action for each autograd.Function class the requested range touches."""
    only = params.context.only
    if only and not any(KIND.startswith(str(k)) or str(k) == KIND for k in only):
        return []
    module_path = _path_of(uri)
    if tree is None or module_path is None or not _importable(module_path):
        return []
    first, last = params.range.start.line + 1, params.range.end.line + 1
    actions = []
    for cls in autograd_functions(tree):
        end = cls.end_lineno or cls.lineno
        start = min([cls.lineno, *(d.lineno for d in cls.decorator_list)])
        if last < start or first > end:
            continue
        inputs = _inputs(cls, tree, values)
        target = test_path(module_path, cls.name)
        target_uri = target.as_uri()
        exists = target.exists()
        edit = types.WorkspaceEdit(document_changes=[
            types.CreateFile(uri=target_uri, options=types.CreateFileOptions(overwrite=True)),
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=target_uri, version=None),
                edits=[types.TextEdit(range=types.Range(start=types.Position(line=0, character=0),
                                                        end=types.Position(line=0, character=0)),
                                      new_text=test_source(module_path, cls, inputs))]),
        ])
        verb = "Rewrite" if exists else "Write"
        actions.append(types.CodeAction(
            title=f"{verb} a gradcheck test for {cls.name} ({target.name})",
            kind=KIND, edit=edit))
    return actions
