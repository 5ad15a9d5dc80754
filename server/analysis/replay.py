"""Replaying whitelisted torch ops on meta tensors: torch's own answer, no data allocated.

torch is imported lazily, on the first replay, so an analysis that needs no exact facts
(or an editor waiting for torch to load) never pays for it. Every call is guarded: an op
that raises becomes an unknown (or an event the rules report), never a crash.
"""

from __future__ import annotations

import threading
from typing import Any

from stridelens.server.analysis import torch_api
from stridelens.server.analysis.facts import TensorFact
from stridelens.server.analysis.values import Const, ModuleValue, SeqValue, TorchRef, Value


class CannotReplay(Exception):
    """An argument has no concrete counterpart (unknown size, unknown object...)."""


_torch: Any = None
_torch_lock = threading.Lock()


def load_torch() -> Any:
    """Import torch once (thread-safe); later calls are free."""
    global _torch
    if _torch is None:
        with _torch_lock:
            if _torch is None:
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    import torch

                    # The first meta op pays a one-off warm-up; pay it here, not mid-analysis.
                    torch.empty(1, device="meta").t()
                    # So do the first Python decompositions: they import torch._dynamo and
                    # sympy (2-3 s), which would otherwise eat the first file's time budget.
                    torch.randn(2, 3, device="meta")
                    torch.nn.functional.batch_norm(
                        torch.empty(2, 3, 4, device="meta"), None, None, training=True
                    )
                _torch = torch
    return _torch


def torch_importable() -> bool:
    """Whether this interpreter has torch, found without importing it (which takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken or blocked `torch` entry in sys.modules
        return False


def torch_loaded() -> bool:
    return _torch is not None


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def to_torch(value: Value) -> Any:
    """The concrete argument for a replay, or CannotReplay."""
    torch = _torch
    if isinstance(value, Const):
        return value.value
    if isinstance(value, TensorFact):
        if value.meta is None:
            raise CannotReplay
        return value.meta
    if isinstance(value, TorchRef):
        path = value.path
        if path.startswith("torch."):
            leaf = path[6:]
            if leaf in torch_api.DTYPES or leaf in torch_api.MEMORY_FORMATS:
                return getattr(torch, leaf)
        raise CannotReplay
    if isinstance(value, SeqValue):
        items = [to_torch(v) for v in value.items]
        return tuple(items) if value.kind == "tuple" else items
    raise CannotReplay


def fact_from_meta(meta: Any, device: str | None) -> TensorFact:
    storage = meta.untyped_storage()
    itemsize = meta.element_size()
    empty = meta.numel() == 0
    return TensorFact(
        shape=tuple(meta.shape),
        dtype=dtype_name(meta.dtype),
        device=device,
        # An empty tensor's strides are arbitrary (meta and CPU kernels pick different ones).
        strides=None if empty else tuple(meta.stride()),
        storage_offset=meta.storage_offset(),
        contiguous=meta.is_contiguous(),
        is_view=meta._base is not None,
        storage_numel=storage.nbytes() // itemsize if itemsize else None,
        element_size=itemsize,
        requires_grad=meta.requires_grad,
        carries_graph=meta.grad_fn is not None,
        storage_key=storage._cdata,
        meta=meta,
    )


def is_meta_tensor(obj: Any) -> bool:
    return _torch is not None and isinstance(obj, _torch.Tensor)


def build_module(module: ModuleValue) -> Any:
    """Instantiate an nn module on the meta device (parameters without storage)."""
    if module.built is not None:
        return module.built
    key = (module.path, repr(module.args), repr(sorted(module.kwargs.items())), module.training)
    shared = _built_modules.get(key)
    if shared is not None:
        module.built = shared
        return shared
    torch = load_torch()
    cls = getattr(torch.nn, module.name)
    args = [
        build_module(a) if isinstance(a, ModuleValue) else to_torch(a) for a in module.args
    ]
    kwargs = {k: to_torch(v) for k, v in module.kwargs.items()}
    if "device" in kwargs:
        kwargs["device"] = "meta"
    with torch.device("meta"):
        built = cls(*args, **kwargs)
    if not module.training:
        built.eval()
    module.built = built
    if len(_built_modules) < _CACHE_LIMIT:
        _built_modules[key] = built
    return built


# Meta modules are stateless for the analysis: instances built from the same literals
# are shared (building one runs its initialisers, which is slow even on meta).
_built_modules: dict[Any, Any] = {}


_fake_mode: Any = None


def conv_with_device_layout(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Convolutions pick their output memory format from the input's on real devices
    (channels_last in, channels_last out); meta does not, FakeTensorMode does."""
    global _fake_mode
    torch = load_torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    if _fake_mode is None:
        _fake_mode = FakeTensorMode(allow_non_fake_inputs=False)

    def fake(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cpu")
        return x

    with _fake_mode:
        out = fn(*[fake(a) for a in args], **{k: fake(v) for k, v in kwargs.items()})
    result = fn(*args, **kwargs)  # meta: right shape and autograd facts
    if tuple(out.stride()) != tuple(result.stride()):
        for fmt in (torch.channels_last, torch.channels_last_3d):
            if out.dim() == (4 if fmt is torch.channels_last else 5) and out.is_contiguous(
                memory_format=fmt
            ):
                return result.contiguous(memory_format=fmt)
    return result


# --------------------------------------------------------------------------- cache
# Many meta kernels are Python decompositions (elementwise ops, batch_norm: milliseconds
# each). Results that are new tensors depend only on the inputs' layouts and the literal
# arguments, so they are cached process-wide and rebuilt with `empty_strided`.
_CACHE_LIMIT = 20_000
_cache: dict[Any, tuple[tuple[int, ...], tuple[int, ...], Any, bool] | None] = {}


def layout_key(obj: Any) -> Any:
    torch = _torch
    if torch is not None and isinstance(obj, torch.Tensor):
        return (
            "T",
            tuple(obj.shape),
            obj.stride(),
            obj.storage_offset(),
            obj.dtype,
            obj.requires_grad,
            obj.untyped_storage().nbytes(),
        )
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, *(layout_key(o) for o in obj))
    if isinstance(obj, dict):
        return ("D", *sorted((k, layout_key(v)) for k, v in obj.items()))
    if isinstance(obj, slice):
        return ("S", obj.start, obj.stop, obj.step)
    if isinstance(obj, (int, float, bool, str, type(None))) or obj is Ellipsis:
        return (type(obj).__name__, obj)
    if torch is not None and isinstance(obj, (torch.dtype, torch.memory_format)):
        return ("C", str(obj))
    raise CannotReplay  # not a value we know how to key


def cached_call(op: Any, args: list[Any], kwargs: dict[str, Any], thunk: Any) -> Any:
    """`thunk()` (which calls `op` on these arguments), answered from the cache when the
    same op already ran on the same layouts. Views and aliases are never cached."""
    torch = _torch
    try:
        key = (op, torch.is_grad_enabled(), layout_key(args), layout_key(kwargs))
    except CannotReplay:
        return thunk()
    seen = key in _cache
    hit = _cache.get(key)
    if hit is not None:
        shape, stride, dtype, grad = hit
        out = torch.empty_strided(shape, stride, dtype=dtype, device="meta", requires_grad=grad)
        return out.clone() if grad else out  # non-leaf, like the real result
    out = thunk()
    if not seen and len(_cache) < _CACHE_LIMIT:
        _cache[key] = _cacheable(out, args, kwargs)
    return out


def _cacheable(out: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    torch = _torch
    if not isinstance(out, torch.Tensor) or out._base is not None or out.storage_offset() != 0:
        return None
    if out.requires_grad and out.grad_fn is None:
        return None
    storage = out.untyped_storage()
    inputs = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
    if any(a.untyped_storage()._cdata == storage._cdata for a in inputs):
        return None  # returned (a view of) an input: replay every time
    fresh = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device="meta")
    if fresh.untyped_storage().nbytes() != storage.nbytes():
        return None
    return (tuple(out.shape), out.stride(), out.dtype, out.requires_grad)
