"""`stridelens record` against torch on released code: the real-code oracle's files
(tests/realcode/sources, origins and licenses in ORIGINS.md) run under the recorder with their
driver's entry points, as plain imports, and every recorded observation (shape, dtype, strides,
storage offset, contiguity, view-ness, requires_grad) is one the driver itself saw torch give
at that line for that name. Lines the recorder stops paying for, or a name rebound to the same
tensor (`nn.Dropout(0.0)` returns its input), may be missing: recall is checked, not asked to
be total."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stridelens.inspector.tensor_recorder import facts_file_name
from tests.realcode import compare, driver

ROOT = Path(__file__).resolve().parents[2]
FILES = ("nanogpt_model", "cifar_resnet", "vitp_vit", "mamba_minimal_model", "detr_transformer", "gmlp_g_mlp")

RUNNER = """
import contextlib, io, sys, types, warnings
sys.path.insert(0, sys.argv[1])
import torch
from tests.realcode import driver
for name in sys.argv[2:]:
    path = driver.SOURCES / f"{name}.py"
    module = types.ModuleType(f"realcode_{name}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    torch.manual_seed(0)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
        driver.ENTRIES[name](module.__dict__)
"""

pytestmark = pytest.mark.timeout(400)


def _key(o: dict[str, object]) -> tuple[object, ...]:
    return (tuple(o["shape"]), o["dtype"], tuple(o["strides"]), o["storage_offset"], o["contiguous"], o["is_view"], o["requires_grad"])  # type: ignore[arg-type]


def test_recorded_facts_are_what_torch_gave(tmp_path: Path) -> None:
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER, encoding="utf-8")
    out = tmp_path / "facts"
    done = subprocess.run(
        [sys.executable, "-m", "stridelens", "record", "--out", str(out), "--", sys.executable, str(runner), str(ROOT), *FILES],
        cwd=ROOT, capture_output=True, text=True, timeout=360, env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert done.returncode == 0, done.stderr
    checked = wrong = tensor_probes = recalled = 0
    problems: list[str] = []
    for name in FILES:
        path = str((driver.SOURCES / f"{name}.py").resolve())
        doc = json.loads((out / facts_file_name(path)).read_text(encoding="utf-8"))
        real_run = compare.real_run(name)
        by_place = {(p.line, p.name): p for p in real_run.probes}
        for line, names in doc["lines"].items():
            for var, entry in names.items():
                probe = by_place.get((int(line), var))
                if probe is None:
                    continue  # a loop target or a parameter: no probe of the driver there
                seen = {
                    (t.shape, t.dtype, t.strides, t.storage_offset, t.contiguous, t.is_view, t.requires_grad)
                    for run in real_run.runs[probe] if (t := run.tensor) is not None
                }
                for observation in entry["observations"]:
                    checked += 1
                    if _key(observation) not in seen:
                        wrong += 1
                        problems.append(f"{name}:{line} {var}: recorded {_key(observation)}, torch gave {sorted(seen)[:2]}")
        for probe in real_run.probes:
            if any(run.tensor is not None for run in real_run.runs[probe]):
                tensor_probes += 1
                recalled += probe.name in doc["lines"].get(str(probe.line), {})
    assert checked > 500, checked
    assert not wrong, "\n".join(problems[:10])
    assert recalled >= 0.8 * tensor_probes, (recalled, tensor_probes)
