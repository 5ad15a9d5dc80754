"""The probe's parts, for whoever puts the probe into a target: the files that run, in this order,
in one private module there (`probe.PRIVATE_NAME`). See probe.py."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from stridelens.inspector import probe, probe_describe, probe_report


def _source_file(module: ModuleType) -> str:
    if module.__file__ is None:  # only a frozen or namespace module has none; stridelens is neither
        raise RuntimeError(f"{module.__name__} has no source file to inject")
    return module.__file__


PARTS = (probe, probe_describe, probe_report)
# Files whose frames are the probe's own (a gc referrer in one of them is not a user's name).
FILES = tuple(map(_source_file, PARTS))
# The filename each part's code runs under in the target. "<stridelens" is how the probe tells
# its own frames from the user's there.
FILENAMES = tuple(f"<stridelens-{Path(path).stem.replace('_', '-')}>" for path in FILES)


def sources() -> list[tuple[str, str]]:
    """(source, filename) of each part, in running order."""
    return [(Path(path).read_text(encoding="utf-8"), filename) for path, filename in zip(FILES, FILENAMES, strict=True)]
