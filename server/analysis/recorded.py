"""Facts `stridelens record` saw at run time: where they are kept, and how they are read.

`stridelens record -- python SCRIPT` (inspector/tensor_recorder.py) writes one JSON file per
source file into `.stridelens/facts/` of the project (the script's git root, else the working
directory), or into the user cache directory when that is not writable. The file is named by a
hash of the source's absolute path and holds the sha256 of the source's bytes as recorded: when
the file has changed since, the facts are still given, marked `stale` (the lines may have moved).

`explain --format json` puts them in `observed`, beside the static fields, never into them; the
text explain and the LSP hover print one "seen at run time" line from `summary()`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stridelens.i18n import ntr, tr
from stridelens.inspector.tensor_recorder import FORMAT_VERSION, facts_file_name, merge_recordings

FACTS_FOLDER = Path(".stridelens") / "facts"
MAX_OBSERVATIONS = 8  # per line and name, when the files of several ranks are merged


def project_root(start: Path) -> Path | None:
    """The git work tree holding `start` (a folder), or None."""
    for folder in [start, *start.parents]:
        if (folder / ".git").exists():
            return folder
    return None


def cache_facts_dir() -> Path:
    """Where facts go when the project cannot be written: the user cache directory."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stridelens" / "facts"


def default_facts_dir(script: Path | None) -> Path:
    """The project's facts folder for a recording of `script` (None: `-m module`, the cwd)."""
    start = script.resolve().parent if script is not None else Path.cwd()
    root = project_root(start) or Path.cwd()
    return root / FACTS_FOLDER


def facts_dirs_for(source: Path) -> list[Path]:
    """The folders that may hold facts of `source`, the project's first."""
    folders = []
    root = project_root(source.parent)
    if root is not None:
        folders.append(root / FACTS_FOLDER)
    folders.append(Path.cwd() / FACTS_FOLDER)
    folders.append(cache_facts_dir())
    unique: list[Path] = []
    for folder in folders:
        if folder not in unique:
            unique.append(folder)
    return unique


@dataclass
class Observed:
    """What the runs saw one name hold after one line."""

    runs: int
    observations: list[dict[str, Any]]
    shape_min: list[int] | None
    shape_max: list[int] | None
    stale: bool
    recorded_at: str | None

    def _common(self, key: str) -> Any:
        values = [o.get(key) for o in self.observations]
        first = values[0] if values else None
        return first if all(v == first for v in values) else None

    def shape(self) -> list[Any] | None:
        """The sizes; where runs differed, `{"min": a, "max": b}` for that entry."""
        if self.shape_min is None or self.shape_max is None:
            return self._common("shape")
        return [lo if lo == hi else {"min": lo, "max": hi} for lo, hi in zip(self.shape_min, self.shape_max, strict=True)]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runs": self.runs, "shape": self.shape()}
        for key in ("dtype", "device", "strides", "storage_offset", "contiguous", "is_view",
                    "requires_grad", "grad_fn", "storage_nbytes"):
            out[key] = self._common(key)
        out["distinct"] = len(self.observations)
        out["recorded_at"] = self.recorded_at
        out["stale"] = self.stale
        return out


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


_CACHE: dict[Path, tuple[tuple[int, int], dict[str, Any] | None]] = {}


def _load(path: Path) -> dict[str, Any] | None:
    """A facts file, read again only when it changed (the hover asks at every move)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (stat.st_mtime_ns, stat.st_size)
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION or not isinstance(doc.get("lines"), dict):
        doc = None
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[path] = (key, doc)
    return doc


def recorded_doc(source: str | Path) -> dict[str, Any] | None:
    """The newest facts of `source` in any of its folders, or None: one file, or the files of
    a torchrun job's ranks (`NAME.rank1.json`, ...) for the same contents, merged."""
    path = Path(source).resolve()
    name = facts_file_name(str(path))
    stem = name.removesuffix(".json")
    found: list[tuple[float, Path]] = []
    for folder in facts_dirs_for(path):
        for candidate in (folder / name, *sorted(folder.glob(f"{stem}.rank*.json"))):
            try:
                found.append((candidate.stat().st_mtime, candidate))
            except OSError:
                continue
    docs = [(mtime, doc) for mtime, candidate in sorted(found, reverse=True) if (doc := _load(candidate)) is not None]
    if not docs:
        return None
    newest = docs[0][1]
    same = [doc for _, doc in docs[1:] if doc.get("sha256") == newest.get("sha256") and doc.get("path") == newest.get("path")]
    merged = newest
    for doc in same:
        merged = merge_recordings(doc, merged, MAX_OBSERVATIONS)
    return merged


def observed_at(source: str | Path, line: int, name: str, text: str | None = None) -> Observed | None:
    """What the recorded runs saw `name` hold after `line` (1-based) of `source`; `text`, the
    source as the editor has it (else the file is read), decides whether the facts are stale."""
    doc = recorded_doc(source)
    if doc is None:
        return None
    digest = text_digest(text) if text is not None else _sha256(Path(source))
    return observed_in(doc, line, name, digest)


def text_digest(text: str) -> str:
    """The sha256 a recording keeps of its file, of the text as the editor has it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def observed_in(doc: dict[str, Any], line: int, name: str, digest: str | None) -> Observed | None:
    """`name` after `line` in a recording already read (`recorded_doc`); `digest`, the sha256
    of the file as it is now, decides whether it is stale."""
    entry = doc["lines"].get(str(line), {}).get(name)
    if not isinstance(entry, dict) or not entry.get("observations"):
        return None
    return Observed(
        runs=int(entry.get("count", 0)),
        observations=list(entry["observations"]),
        shape_min=entry.get("shape_min"),
        shape_max=entry.get("shape_max"),
        stale=digest != doc.get("sha256"),
        recorded_at=doc.get("recorded_at"),
    )


def format_shape(shape: list[Any]) -> str:
    parts = [str(s) if not isinstance(s, dict) else f"{s['min']}..{s['max']}" for s in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def summary(observed: Observed) -> str:
    """One line: "seen at run time (8 runs): (16, 4, 32, 32) float32 cpu, strides (...), ..."."""
    facts = observed.to_json()
    head = ntr("seen at run time ({n} run)", "seen at run time ({n} runs)", observed.runs).format(n=observed.runs)
    if observed.stale:
        head += tr(", stale: the file changed since")
    parts = []
    shape = facts["shape"]
    if shape is not None:
        parts.append(format_shape(shape))
    parts += [str(facts[k]) for k in ("dtype", "device") if facts[k] is not None]
    text = " ".join(parts) if parts else tr("shapes of different ranks")
    extra = []
    if facts["strides"] is not None:
        extra.append(tr("strides {strides}").format(strides=format_shape(facts["strides"])))
    if facts["contiguous"] is not None:
        extra.append(tr("contiguous") if facts["contiguous"] else tr("not contiguous"))
    if facts["is_view"] is not None:
        extra.append(tr("a view") if facts["is_view"] else tr("its own storage"))
    if facts["requires_grad"]:
        extra.append("requires_grad")
    if facts["grad_fn"]:
        extra.append(f"grad_fn {facts['grad_fn']}")
    return f"{head}: " + tr(", ").join([text, *extra])


def disagreements(observed: Observed, static: dict[str, Any]) -> list[str]:
    """The fields where the static answer (explain's JSON) differs from every recorded run."""
    if observed.stale:
        return []
    facts = observed.to_json()
    out = []
    shape = static.get("shape")
    if isinstance(shape, list) and all(isinstance(s, int) for s in shape) and facts["shape"] is not None:
        if len(shape) != len(facts["shape"]) or any(
            not isinstance(r, dict) and r != s for r, s in zip(facts["shape"], shape, strict=False)
        ):
            out.append("shape")
    for key in ("dtype", "device", "contiguous", "is_view", "requires_grad"):
        if static.get(key) is not None and facts[key] is not None and static[key] != facts[key]:
            out.append(key)
    strides = static.get("strides")
    if isinstance(strides, list) and all(isinstance(s, int) for s in strides) and facts["strides"] is not None:
        if list(strides) != list(facts["strides"]):
            out.append("strides")
    return out
