"""Compiled code of the methods attrs and cattrs generate, kept across server starts.

lsprotocol defines ~570 attrs classes, and attrs writes each one's `__init__`, `__repr__`,
`__eq__`... as Python source and compiles it at import time: `compile` was 0.3-0.45 s of the
server's ~0.9 s of imports, the largest part of its time to first diagnostics. The source is
the same at every start, so its code objects are kept in one marshal file, as Python keeps a
module's bytecode in `__pycache__`, and the next start reads them back (~0.03 s) instead of
compiling.

How: attrs (`attr/_make.py`) and cattrs (`cattrs/gen`) call the builtin `compile` by its
global name; `install()` gives those two modules a `compile` that first looks the code up by
a digest of (source, filename, mode). Anything else (flags, bytes sources) goes to the real
builtin, and if a new attrs stops calling `compile` this way the cache is simply unused.
A code object for the same source is the same whoever compiled it, so nothing else changes.

The file lives in `$STRIDELENS_CACHE_DIR`, else `$XDG_CACHE_HOME/stridelens`, else
`~/.cache/stridelens`; `STRIDELENS_CACHE_DIR=""` turns the cache off. Its name carries the
interpreter's bytecode tag and which attrs/cattrs/lsprotocol installation it is for. A file that cannot be
read, is not ours, is writable by others, or does not unmarshal is ignored (and replaced
at the next save); a failed save is ignored too: the cache only ever saves time.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import importlib.util
import logging
import marshal
import os
import stat
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

log = logging.getLogger("stridelens.lsp")

ENV_DIR = "STRIDELENS_CACHE_DIR"
# The modules whose generated code is cached: the ones that compile it by calling `compile`.
PATCHED_MODULES = ("attr._make", "cattrs.gen")
# Whose installation the cached code comes from (a file per installation, so two venvs with
# different versions do not overwrite each other's at every start).
_SOURCES = ("attr", "cattrs", "lsprotocol")

_real_compile = builtins.compile


class CodeCache:
    """Digest of (source, filename, mode) -> code object, loaded from and saved to `path`."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.codes: dict[bytes, types.CodeType] = {}
        self.used: set[bytes] = set()
        self.misses = 0
        if path is not None:
            self.codes = _load(path)

    def compile(self, source: Any, filename: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not isinstance(source, str) or not isinstance(filename, str):
            return _real_compile(source, filename, mode, *args, **kwargs)
        key = hashlib.blake2b(
            f"{mode}\0{filename}\0{source}".encode("utf-8", "surrogatepass"), digest_size=16
        ).digest()
        self.used.add(key)
        code = self.codes.get(key)
        if code is None:
            code = _real_compile(source, filename, mode)
            self.codes[key] = code
            self.misses += 1
        return code

    def save(self) -> bool:
        """Write the entries this process used, if enough was compiled anew; True if written.
        A start that found nearly all of its code is not worth a rewrite: attrs' `__hash__`
        of a hashable class holds the process's (randomized) string hash of its name, so a
        source or two differ at every start."""
        if self.path is None or self.misses == 0:
            return False
        if self.codes and self.misses * 50 < len(self.used):
            return False
        entries = {key: code for key, code in self.codes.items() if key in self.used}
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".codes-", suffix=".tmp")
            try:
                with os.fdopen(handle, "wb") as out:
                    marshal.dump(entries, out)
                os.replace(temp, self.path)  # readers see the old file or the new one, whole
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise
        except (OSError, ValueError) as err:
            log.info("generated-code cache not saved (%s): %s", self.path, err)
            return False
        self.misses = 0
        return True


def cache_path(environ: dict[str, str] | None = None) -> Path | None:
    """Where the cache file is, or None when it is turned off."""
    env = os.environ if environ is None else environ
    if ENV_DIR in env:
        folder = env[ENV_DIR]
        if not folder:
            return None
        base = Path(folder)
    else:
        root = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = Path(root) / "stridelens"
    tag = sys.implementation.cache_tag or "python"
    return base / f"generated-code.{tag}.{_installation_key()}.marshal"


def _installation_key() -> str:
    """A digest of where attrs, cattrs and lsprotocol are installed and when their files were
    written: an upgrade or another venv gets another file. (Not importlib.metadata's versions:
    importing it added 40-70 ms to every start, more than a third of what the cache saves.)"""
    parts = []
    for name in _SOURCES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        try:
            info = os.stat(origin) if origin else None
        except OSError:
            info = None
        parts.append(f"{origin}:{info.st_mtime_ns}:{info.st_size}" if info else f"{name}:none")
    return hashlib.blake2b("\n".join(parts).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _load(path: Path) -> dict[bytes, types.CodeType]:
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            # Code from this file is run: only if this user wrote it and nobody else can.
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                log.info("generated-code cache ignored (not owned by this user, or writable by others): %s", path)
                return {}
            data = marshal.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, EOFError, ValueError, TypeError) as err:
        log.info("generated-code cache ignored (%s): %s", path, err)
        return {}
    if not isinstance(data, dict) or not all(
        isinstance(k, bytes) and isinstance(v, types.CodeType) for k, v in data.items()
    ):
        log.info("generated-code cache ignored (not a cache file): %s", path)
        return {}
    return data


_installed: CodeCache | None = None


def install(environ: dict[str, str] | None = None) -> CodeCache | None:
    """Give attrs and cattrs the caching `compile`, before lsprotocol's classes are defined.
    Returns the cache (the same one on a second call), or None when turned off."""
    global _installed
    if _installed is not None:
        return _installed
    path = cache_path(environ)
    if path is None:
        return None
    cache = CodeCache(path)
    for name in PATCHED_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.compile = cache.compile  # type: ignore[attr-defined]
    _installed = cache
    return cache


def save() -> bool:
    """Write what this process compiled anew (call once its imports and first messages are done)."""
    return _installed.save() if _installed is not None else False
