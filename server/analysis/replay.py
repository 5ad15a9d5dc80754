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
                _torch = torch
    return _torch


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
    return TensorFact(
        shape=tuple(meta.shape),
        dtype=dtype_name(meta.dtype),
        device=device,
        strides=tuple(meta.stride()),
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
    return built


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
