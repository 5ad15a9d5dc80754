"""Addresses of a few exported functions in a live process, from its ELF files and /proc maps.

gdb would find them too, but only after reading the libraries' symbols while the target sits
in ptrace stop; reading the dynamic symbol tables here first, before gdb attaches, leaves gdb
nothing to do in the target but three calls. Linux, 64-bit little-endian ELF only.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

SHT_DYNSYM = 11
PT_LOAD = 1
ET_EXEC = 2


class NotFound(Exception):
    """A symbol or a mapped file that the process does not have."""


def _dynamic_symbols(path: str, wanted: set[str]) -> tuple[dict[str, int], int, int]:
    """(name -> st_value for `wanted`, e_type, the first PT_LOAD's vaddr rounded to its page)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise NotFound(f"{path} is not a 64-bit little-endian ELF file")
    e_type, = struct.unpack_from("<H", data, 16)
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 32)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", data, 54)
    first_load = None
    for i in range(e_phnum):
        p_type, _flags, _off, p_vaddr = struct.unpack_from("<IIQQ", data, e_phoff + i * e_phentsize)
        if p_type == PT_LOAD:
            first_load = p_vaddr & ~0xFFF
            break
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    found: dict[str, int] = {}
    for sh in sections:
        if sh[1] != SHT_DYNSYM:
            continue
        sym_off, sym_size, link, entsize = sh[4], sh[5], sh[6], sh[9] or 24
        str_off = sections[link][4]
        for off in range(sym_off, sym_off + sym_size, entsize):
            st_name, _info, _other, shndx, st_value = struct.unpack_from("<IBBHQ", data, off)
            if not st_value or not shndx:
                continue  # undefined here (imported from another library)
            end = data.index(b"\0", str_off + st_name)
            name = data[str_off + st_name:end].decode(errors="replace")
            if name in wanted:
                found[name] = st_value
    return found, e_type, first_load or 0


def _mapped_files(pid: int) -> dict[str, int]:
    """Path -> lowest address it is mapped at, for the files mapped at file offset 0."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        start = int(parts[0].split("-")[0], 16)
        if int(parts[2], 16) == 0:
            path = parts[5]
            out[path] = min(start, out.get(path, start))
    return out


def resolve(pid: int, names_by_lib: dict[str, set[str]]) -> dict[str, int]:
    """Addresses in PID of the named functions. `names_by_lib` maps a file-name test
    ("libpython3", "libc.so", or "" for the executable) to the names to look up there;
    raises NotFound when one is missing."""
    files = _mapped_files(pid)
    exe = os.readlink(f"/proc/{pid}/exe")
    out: dict[str, int] = {}
    for lib, names in names_by_lib.items():
        paths = [p for p in files if lib and lib in os.path.basename(p)]
        paths.append(exe)  # statically linked interpreters keep everything in the executable
        for path in paths:
            if path not in files:
                continue
            try:
                found, e_type, first = _dynamic_symbols(f"/proc/{pid}/root{path}" if os.path.exists(
                    f"/proc/{pid}/root{path}") else path, names)
            except (OSError, NotFound, struct.error, ValueError):
                continue
            base = 0 if e_type == ET_EXEC else files[path] - first
            for n, v in found.items():
                out.setdefault(n, base + v)
            if names <= out.keys():
                break
        missing = names - out.keys()
        if missing:
            raise NotFound(", ".join(sorted(missing)))
    return out
