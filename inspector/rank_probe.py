"""Runs inside each rank (injected like the probe): which rank it is and which device it uses.

Standard library only; it reads the target's torch without initialising anything: the current
CUDA device is read only where CUDA is already initialised (reading it would create a context).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any


def N_(message: str) -> str:
    """Marks an English template for the catalogue (no stridelens import here; see probe.N_)."""
    return message

PRIVATE_NAME = "_stridelens_rank_probe"


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v is not None and v.lstrip("-").isdigit() else None


def rank_info() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    dist = sys.modules.get("torch.distributed")
    out: dict[str, Any] = {
        "pid": os.getpid(), "host": socket.gethostname(),
        "rank": _env_int("RANK"), "local_rank": _env_int("LOCAL_RANK"),
        "world_size": _env_int("WORLD_SIZE"), "local_world_size": _env_int("LOCAL_WORLD_SIZE"),
        "process_group": None, "cuda": None,
    }
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            out["process_group"] = {"backend": str(dist.get_backend()), "rank": dist.get_rank(),
                                    "world_size": dist.get_world_size()}
    except (RuntimeError, ValueError):
        pass
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available() and cuda.is_initialized():
        out["cuda"] = {"current_device": int(cuda.current_device()), "device_count": int(cuda.device_count())}
    return out


def rank_info_json() -> str:
    try:
        return json.dumps({"ok": True, "result": rank_info()})
    except Exception as e:  # noqa: BLE001 -- never raise into the user's process
        return json.dumps({"ok": False, "error": N_("rank probe failed: {error}").format(error=f"{type(e).__name__}: {e}")})
