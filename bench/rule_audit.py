"""Rule audit on released PyTorch model and training code: findings per rule per corpus.

    python bench/rule_audit.py [--corpora LABEL,...] [--jobs N] [--bin EXE | --pythonpath DIR]
                               [--json OUT] [--sample N] [--seed S] [--rules SL204,SL201]
                               [--context L]
    python bench/rule_audit.py --load OUT.json [--sample N --seed S --rules ...] [--compare OLD.json]

Each corpus in `CORPORA` below is linted with
`stridelens check --format json --no-config --select ALL -j N PATHS...`, run inside
bench/_corpus/ (git-ignored; the code there is only unzipped or copied, never imported).
`--select ALL`: every rule is measured, those off by default included (server/rules
`OFF_BY_DEFAULT`), so an audit can tell when one of them reaches the 0.9 that puts it back on;
a finding's code says whether its rule is on by default. Printed:
files, lines, seconds and findings per corpus, a corpus x rule table of counts, and a
corpus x severity table. `--json OUT` writes the counts and every finding (paths relative to
bench/_corpus/). `--sample N` prints N random findings per rule (`--rules`, default SL1 and
SL2 rules), drawn across corpora with `--seed`, each with its file:line, message and
+-`--context` lines of source, for a hand precision audit. `--load OUT.json` reprints the
tables and draws samples from an earlier run without running stridelens again.
`--compare OLD.json` prints, per rule, the findings gained and lost against an earlier --json.

Corpora (`--corpora fresh` names the held-out ones of FRESH, which the default run leaves out):
  - PyPI ones (`Pypi`) are downloaded on demand with `pip download --no-deps` (wheels) and
    unzipped, as bench/lint_corpus.py does;
  - GitHub ones (`GitHub`) must already exist under bench/_corpus/gh/LABEL/ (the `.py` files
    and LICENSE of the listed sub-folders, copied from the repository at the commit in the
    table, which gh/LABEL/ORIGIN records as "owner/name commit"; see bench/_corpus/MANIFEST.md);
    a missing one is skipped with a note.

Engines (run with PYTHONHASHSEED=0 unless it is set). Messages are not byte-stable between
runs: SL103's "assuming ..." list comes out in varying order even with a fixed seed, so
`--compare OLD.json` matches findings on (corpus, path, line, column, code), not message:
  - default: the `stridelens` next to this Python (the venv's; editable install = work tree);
  - `--bin EXE`: another `stridelens` executable;
  - `--pythonpath DIR`: a source checkout of stridelens (e.g. a frozen one made by
    `git archive HEAD | tar -x -C DIR`), run as `python -m stridelens` with this Python and
    `PYTHONPATH` pointing at an import shim that maps `stridelens` -> DIR/server/_root,
    `stridelens.server` -> DIR/server, `stridelens.inspector` -> DIR/inspector (the mapping
    pyproject.toml's package-dir sets up). The engine actually imported is printed.

Example (a before/after comparison of the rules):
    git -C . archive HEAD | tar -x -C /tmp/sl_before
    python bench/rule_audit.py --pythonpath /tmp/sl_before --json /tmp/before.json
    python bench/rule_audit.py --json /tmp/after.json --sample 10 --seed 1 --rules SL204,SL206
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "_corpus"
GH = CORPUS / "gh"


@dataclass(frozen=True)
class Pypi:
    spec: str  # name==version, as pip takes it
    paths: tuple[str, ...]  # inside the unzipped wheel; globs allowed


@dataclass(frozen=True)
class GitHub:
    repo: str  # owner/name
    commit: str
    paths: tuple[str, ...]  # sub-folders of the repository that were copied


# label -> origin. The PyPI "latest" versions are pinned to what was latest when the corpus was
# built, so counts stay comparable between runs.
CORPORA: dict[str, Pypi | GitHub] = {
    "timm": Pypi("timm==1.0.31", ("timm",)),
    "torchvision": Pypi("torchvision==0.29.1", ("torchvision",)),
    "transformers-models": Pypi("transformers==5.24.0", ("transformers/models",)),
    "transformers-trainer": Pypi("transformers==5.24.0", ("transformers/trainer*.py",)),
    "torchtune": Pypi("torchtune==0.6.1", ("torchtune",)),
    "torchtune-recipes": Pypi("torchtune==0.6.1", ("recipes",)),
    "skorch": Pypi("skorch==1.4.0", ("skorch",)),
    "mmengine": Pypi("mmengine==0.10.7", ("mmengine",)),
    "accelerate": Pypi("accelerate==1.15.0", ("accelerate",)),
    "pytorch-lightning": Pypi("pytorch-lightning==2.6.6", ("pytorch_lightning", "lightning_fabric")),
    "pytorch-examples": GitHub("pytorch/examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8", (".",)),
    "nanogpt": GitHub("karpathy/nanoGPT", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291", (".",)),
    "lightning-examples": GitHub(
        "Lightning-AI/pytorch-lightning", "7f0c3436cd3f6ad3753125672024fc415cbcb414", ("examples",)
    ),
    "accelerate-examples": GitHub(
        "huggingface/accelerate", "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83", ("examples",)
    ),
    "detectron2": GitHub(
        "facebookresearch/detectron2",
        "02b5c4e295e990042a714712c21dc79b731e8833",
        ("tools", "detectron2/engine", "detectron2/evaluation"),
    ),
    "mmengine-examples": GitHub(
        "open-mmlab/mmengine", "254342938d9bde1775c39ea7d5181c5d294026c4", ("examples",)
    ),
}

# Held out: the corpora of the fresh hand audit (bench/audits/fresh-audit-2026-12-03.md), code no
# test, oracle or earlier audit had used. Not in the default run, so that rules are not tuned on
# them by accident; name them with --corpora (or --corpora fresh for all of them).
FRESH: dict[str, Pypi | GitHub] = {
    "fastai": Pypi("fastai==2.8.12", ("fastai",)),
    "ignite": Pypi("pytorch-ignite==0.5.5", ("ignite",)),
    "sentence-transformers": Pypi("sentence-transformers==6.3.0", ("sentence_transformers",)),
    "ultralytics": Pypi("ultralytics==8.4.190", ("ultralytics",)),
    "stable-baselines3": Pypi("stable-baselines3==2.9.2", ("stable_baselines3",)),
    "torchrl": Pypi("torchrl==0.14.1", ("torchrl",)),
    "torchrl-sota": Pypi("torchrl==0.14.1", ("sota-implementations",)),
    "pyro": Pypi("pyro-ppl==1.9.2", ("pyro",)),
    "speechbrain": Pypi("speechbrain==1.1.2", ("speechbrain",)),
    "kornia": Pypi("kornia==0.9.0", ("kornia",)),
    "gpytorch": Pypi("gpytorch==1.15.2", ("gpytorch",)),
    "metric-learning": Pypi("pytorch-metric-learning==2.9.0", ("pytorch_metric_learning",)),
    "avalanche": Pypi("avalanche-lib==0.6.0", ("avalanche",)),
    "avalanche-examples": Pypi("avalanche-lib==0.6.0", ("examples",)),
    "d2l": Pypi("d2l==1.0.3", ("d2l/torch.py",)),
    "flair": Pypi("flair==0.15.1", ("flair",)),
    # labml_nn without diffusion/ and unet/ (the kinds of code the issue-30 held-out audit used)
    "labml-nn": Pypi("labml-nn==0.5.1", (
        "labml_nn/activations",
        "labml_nn/adaptive_computation",
        "labml_nn/capsule_networks",
        "labml_nn/cfr",
        "labml_nn/conv_mixer",
        "labml_nn/distillation",
        "labml_nn/experiments",
        "labml_nn/gan",
        "labml_nn/graphs",
        "labml_nn/helpers",
        "labml_nn/hypernetworks",
        "labml_nn/lora",
        "labml_nn/lstm",
        "labml_nn/neox",
        "labml_nn/normalization",
        "labml_nn/optimizers",
        "labml_nn/recurrent_highway_networks",
        "labml_nn/resnet",
        "labml_nn/rl",
        "labml_nn/rwkv",
        "labml_nn/sampling",
        "labml_nn/scaling",
        "labml_nn/sketch_rnn",
        "labml_nn/transformers",
        "labml_nn/uncertainty",
        "labml_nn/utils",
    )),
    # open_clip_train only: open_clip's model code derives from openai/CLIP, a test source
    "open-clip-train": Pypi("open-clip-torch==3.3.0", ("open_clip_train",)),
    "widedeep": Pypi("pytorch-widedeep==1.7.0", ("pytorch_widedeep",)),
    "skrl": Pypi("skrl==2.1.1", ("skrl",)),
    "tianshou": Pypi("tianshou==2.0.1", ("tianshou",)),
    "torch-geometric": Pypi("torch-geometric==2.8.1", ("torch_geometric",)),
    "torchmetrics": Pypi("torchmetrics==1.9.0", ("torchmetrics",)),
    "x-transformers": Pypi("x-transformers==2.31.10", ("x_transformers",)),
    "pyg-examples": GitHub("pyg-team/pytorch_geometric", "5c6461b2305ad068a6d61165b3c55852a11aaa41", ("examples",)),
    "pyro-examples": GitHub("pyro-ppl/pyro", "ff6ae1c9572591791aae8842bcd702fcf0b46fd6", ("examples",)),
    "ignite-examples": GitHub("pytorch/ignite", "de08e799cfb55a6cf4aa778575d6bad725385453", ("examples",)),
}
DEFAULT_CORPORA = tuple(CORPORA)
CORPORA.update(FRESH)

AUDITED = tuple(f"SL10{i}" for i in range(1, 5)) + tuple(f"SL2{i:02d}" for i in range(1, 13))
SEVERITIES = ("error", "warning", "information", "hint")


# ------------------------------------------------------------------------------ corpora
def wheel_tree(spec: str) -> Path:
    """Download (once) and unzip (once) the wheel of `spec`; return the unzipped folder."""
    name, _, version = spec.partition("==")
    stem = name.replace("-", "_")
    pattern = f"{stem}-{version or '*'}-*.whl"
    wheels = sorted(CORPUS.glob(pattern))
    if not wheels:
        CORPUS.mkdir(exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "-q", spec, "-d", str(CORPUS)],
            check=True,
        )
        wheels = sorted(CORPUS.glob(pattern))
    wheel = wheels[-1]
    target = CORPUS / wheel.name.removesuffix(".whl")
    if not target.exists():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
    return target


def corpus_paths(label: str) -> list[Path] | None:
    """The files/folders to lint for `label`, or None (with a note printed) if unavailable."""
    origin = CORPORA[label]
    if isinstance(origin, Pypi):
        try:
            root = wheel_tree(origin.spec)
        except subprocess.CalledProcessError as err:
            print(f"note: {label}: pip download {origin.spec} failed ({err}); skipped")
            return None
    else:
        root = GH / label
        if not root.is_dir():
            print(f"note: {label}: {root.relative_to(HERE.parent)} does not exist (copy {origin.repo}"
                  f"@{origin.commit[:12]} {' '.join(origin.paths)} there); skipped")
            return None
        stamp = root / "ORIGIN"
        recorded = stamp.read_text().split() if stamp.exists() else []
        if recorded != [origin.repo, origin.commit]:
            print(f"note: {label}: {stamp} says {' '.join(recorded) or 'nothing'}, "
                  f"the table says {origin.repo} {origin.commit}")
    found: list[Path] = []
    for sub in origin.paths:
        hits = sorted(Path(p) for p in glob.glob(str(root / sub)))
        if not hits:
            print(f"note: {label}: {sub} not found under {root}")
        found.extend(hits)
    return found or None


def python_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(path.rglob("*.py")))
        elif path.suffix == ".py":
            files.append(path)
    return files


def count_lines(files: list[Path]) -> int:
    return sum(f.read_bytes().count(b"\n") for f in files)


# ------------------------------------------------------------------------------ engine
@dataclass
class Engine:
    argv: list[str]
    env: dict[str, str]
    description: str
    shim: Path | None = None

    def close(self) -> None:
        if self.shim is not None:
            shutil.rmtree(self.shim, ignore_errors=True)


def make_engine(bin_path: str | None, pythonpath: str | None) -> Engine:
    env = dict(os.environ)
    # Fewer differences from set order between runs; not all (see the module docstring).
    env.setdefault("PYTHONHASHSEED", "0")
    if pythonpath is None:
        exe = Path(bin_path).resolve() if bin_path else Path(sys.executable).with_name("stridelens")
        if not exe.exists():
            found = shutil.which(bin_path or "stridelens")
            if found is None:
                raise SystemExit(f"no stridelens executable at {exe}")
            exe = Path(found)
        return Engine([str(exe)], env, f"executable {exe}")
    src = Path(pythonpath).resolve()
    if (src / "server" / "_root" / "__init__.py").exists():
        # A source checkout: build the import layout pyproject.toml's package-dir describes.
        shim = Path(tempfile.mkdtemp(prefix="sl_shim_"))
        pkg = shim / "stridelens"
        pkg.mkdir()
        for item in (src / "server" / "_root").iterdir():
            if item.suffix == ".py":
                (pkg / item.name).symlink_to(item)
        (pkg / "server").symlink_to(src / "server", target_is_directory=True)
        if (src / "inspector").is_dir():
            (pkg / "inspector").symlink_to(src / "inspector", target_is_directory=True)
        root = shim
    elif (src / "stridelens" / "__init__.py").exists():  # already an installed-style layout
        shim, root = None, src
    else:
        raise SystemExit(f"{src} is neither a stridelens checkout (server/_root/) nor holds stridelens/")
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    probe = subprocess.run(
        [sys.executable, "-c", "import stridelens.server.cli as m; print(m.__file__)"],
        env=env, capture_output=True, text=True, cwd=CORPUS,
    )
    if probe.returncode != 0:
        raise SystemExit(f"cannot import stridelens from {src}: {probe.stderr.strip()}")
    imported = Path(probe.stdout.strip()).resolve()
    if src not in imported.parents:
        raise SystemExit(f"--pythonpath {src}: stridelens.server.cli was imported from {imported} instead")
    return Engine([sys.executable, "-m", "stridelens"], env, f"source {src} (imports {imported})", shim)


def run_check(engine: Engine, paths: list[Path], jobs: int) -> tuple[float, list[dict[str, Any]], list[str]]:
    argv = [*engine.argv, "check", "--format", "json", "--no-config", "--select", "ALL", "-j", str(jobs),
            *(str(p.relative_to(CORPUS)) for p in paths)]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=engine.env, cwd=CORPUS)
    elapsed = time.perf_counter() - start
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    if proc.returncode not in (0, 1, 2) or not proc.stdout.strip():
        print(f"  stridelens exited {proc.returncode}: {proc.stderr.strip()[-500:]}", file=sys.stderr)
        return elapsed, [], errors
    return elapsed, json.loads(proc.stdout), errors


# ------------------------------------------------------------------------------ output
def print_counts(rows: dict[str, dict[str, Any]], codes: list[str]) -> None:
    width = max([len(label) for label in rows] + [5])
    print("\nfindings per rule (rows: corpus; columns: rule)")
    print(f"{'corpus':<{width}} " + " ".join(f"{c[2:]:>5}" for c in codes) + f" {'total':>6}")
    totals: Counter[str] = Counter()
    for label, row in rows.items():
        per = row["by_rule"]
        totals.update(per)
        print(f"{label:<{width}} " + " ".join(f"{per.get(c, 0):>5}" for c in codes)
              + f" {sum(per.values()):>6}")
    print(f"{'all':<{width}} " + " ".join(f"{totals.get(c, 0):>5}" for c in codes)
          + f" {sum(totals.values()):>6}")
    print("(column headers drop the 'SL' prefix: 101 = SL101)")

    print("\nfindings per severity")
    print(f"{'corpus':<{width}} " + " ".join(f"{s:>11}" for s in SEVERITIES))
    sev_totals: Counter[str] = Counter()
    for label, row in rows.items():
        sev = row["by_severity"]
        sev_totals.update(sev)
        print(f"{label:<{width}} " + " ".join(f"{sev.get(s, 0):>11}" for s in SEVERITIES))
    print(f"{'all':<{width}} " + " ".join(f"{sev_totals.get(s, 0):>11}" for s in SEVERITIES))


def source_context(path: Path, line: int, radius: int) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        return [f"      (cannot read {path}: {err})"]
    lo, hi = max(1, line - radius), min(len(lines), line + radius)
    return [f"  {'>' if n == line else ' '} {n:>5} | {lines[n - 1]}" for n in range(lo, hi + 1)]


def print_sample(findings: list[dict[str, Any]], rules: list[str], n: int, seed: int, radius: int) -> None:
    rng = random.Random(seed)
    ordered = sorted(findings, key=lambda f: (f["corpus"], f["path"], f["line"], f["column"], f["code"]))
    for code in rules:
        pool = [f for f in ordered if f["code"] == code]
        picked = rng.sample(pool, min(n, len(pool)))
        print(f"\n{'=' * 100}\n{code}: {len(picked)} of {len(pool)} findings (seed {seed})")
        for i, f in enumerate(picked, 1):
            print(f"\n[{code} #{i}] [{f['corpus']}] {f['path']}:{f['line']}:{f['column']} "
                  f"({f['severity']})\n  {f['message']}")
            print("\n".join(source_context(CORPUS / f["path"], f["line"], radius)))
            print("  verdict: [ ] true positive  [ ] false positive  note:")


def finding_key(f: dict[str, Any]) -> tuple[str, str, int, int, str]:
    return (f["corpus"], f["path"], f["line"], f["column"], f["code"])


def print_compare(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    """Findings gained and lost per rule; only corpora present in both runs are compared."""
    both = {f["corpus"] for f in old} & {f["corpus"] for f in new}
    old_by = {finding_key(f): f for f in old if f["corpus"] in both}
    new_by = {finding_key(f): f for f in new if f["corpus"] in both}
    gained = [new_by[k] for k in sorted(new_by.keys() - old_by.keys())]
    lost = [old_by[k] for k in sorted(old_by.keys() - new_by.keys())]
    print(f"\ncompared with the earlier run ({len(both)} corpora with findings in both): "
          f"{len(gained)} findings gained, {len(lost)} lost")
    for code in sorted({f["code"] for f in gained + lost}):
        plus = [f for f in gained if f["code"] == code]
        minus = [f for f in lost if f["code"] == code]
        print(f"  {code}: +{len(plus)} -{len(minus)}")
        for sign, group in (("+", plus), ("-", minus)):
            for f in group:
                print(f"    {sign} {f['path']}:{f['line']}:{f['column']} {f['message'][:120]}")


# ------------------------------------------------------------------------------ main
def parse_codes(text: str) -> list[str]:
    return [c.strip().upper() for c in text.split(",") if c.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", default=",".join(DEFAULT_CORPORA),
                        help="comma-separated labels (default: all but the held-out fresh-audit ones; "
                             "'fresh' names those): " + ", ".join(CORPORA))
    parser.add_argument("--jobs", "-j", type=int, default=2, help="stridelens check -j (default 2)")
    engine_group = parser.add_mutually_exclusive_group()
    engine_group.add_argument("--bin", help="stridelens executable to run")
    engine_group.add_argument("--pythonpath", help="stridelens source checkout to run (python -m stridelens)")
    parser.add_argument("--json", dest="json_out", help="write counts and all findings here")
    parser.add_argument("--sample", type=int, default=0, help="findings per rule to print with context")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rules", default=",".join(AUDITED), help="rules to sample (comma-separated)")
    parser.add_argument("--context", type=int, default=6, help="source lines each side of a sample")
    parser.add_argument("--load", metavar="JSON", help="run nothing: tables and samples from an earlier --json")
    parser.add_argument("--compare", metavar="OLD", help="findings gained/lost per rule against an earlier --json")
    args = parser.parse_args()

    if args.load:
        saved = json.loads(Path(args.load).read_text())
        print(f"loaded {args.load}: engine {saved['engine']}; PYTHONHASHSEED={saved.get('pythonhashseed')}")
        print_counts(saved["corpora"], sorted(set(AUDITED) | {f["code"] for f in saved["findings"]}))
        if args.sample > 0:
            print_sample(saved["findings"], parse_codes(args.rules), args.sample, args.seed, args.context)
        if args.compare:
            print_compare(json.loads(Path(args.compare).read_text())["findings"], saved["findings"])
        return 0

    labels = [label.strip() for label in args.corpora.split(",") if label.strip()]
    labels = [name for label in labels for name in (FRESH if label == "fresh" else (label,))]
    unknown = [label for label in labels if label not in CORPORA]
    if unknown:
        parser.error(f"unknown corpora {unknown}; known: {', '.join(CORPORA)}")
    engine = make_engine(args.bin, args.pythonpath)
    print(f"engine: {engine.description}; PYTHONHASHSEED={engine.env['PYTHONHASHSEED']}")
    print(f"command: {' '.join(engine.argv)} check --format json --no-config --select ALL -j {args.jobs} PATHS "
          f"(cwd {CORPUS})")

    rows: dict[str, dict[str, Any]] = {}
    all_findings: list[dict[str, Any]] = []
    skipped: list[str] = []
    started = time.perf_counter()
    print(f"\n{'corpus':<21} {'files':>6} {'lines':>9} {'seconds':>8} {'findings':>8} {'stderr':>6}")
    try:
        for label in labels:
            paths = corpus_paths(label)
            if paths is None:
                skipped.append(label)
                continue
            files = python_files(paths)
            lines = count_lines(files)
            elapsed, findings, errors = run_check(engine, paths, args.jobs)
            for f in findings:
                f["corpus"] = label
                f.pop("fix", None)
            all_findings.extend(findings)
            rows[label] = {
                "origin": {"kind": type(CORPORA[label]).__name__, **asdict(CORPORA[label])},
                "paths": [str(p.relative_to(CORPUS)) for p in paths],
                "files": len(files),
                "lines": lines,
                "seconds": round(elapsed, 2),
                "stderr": errors,
                "by_rule": dict(sorted(Counter(f["code"] for f in findings).items())),
                "by_severity": dict(Counter(f["severity"] for f in findings)),
            }
            print(f"{label:<21} {len(files):>6} {lines:>9} {elapsed:>8.1f} {len(findings):>8} {len(errors):>6}",
                  flush=True)
            for line in errors[:5]:
                print(f"    stderr: {line[:160]}")
            if len(errors) > 5:
                print(f"    stderr: ... {len(errors) - 5} more lines (all in --json)")
    finally:
        engine.close()
    total_s = time.perf_counter() - started
    print(f"total: {sum(r['files'] for r in rows.values())} files, "
          f"{sum(r['lines'] for r in rows.values())} lines, {total_s:.1f} s"
          + (f"; skipped: {', '.join(skipped)}" if skipped else ""))

    seen = {f["code"] for f in all_findings}
    codes = sorted(set(AUDITED) | seen)
    print_counts(rows, codes)

    if args.json_out:
        payload = {
            "engine": engine.description,
            "pythonhashseed": engine.env["PYTHONHASHSEED"],
            "jobs": args.jobs,
            "total_seconds": round(total_s, 2),
            "skipped": skipped,
            "corpora": rows,
            "findings": all_findings,
        }
        Path(args.json_out).write_text(json.dumps(payload, indent=1) + "\n")
        print(f"\nwrote {args.json_out} ({len(all_findings)} findings)")

    if args.sample > 0:
        print_sample(all_findings, parse_codes(args.rules), args.sample, args.seed, args.context)
    if args.compare:
        print_compare(json.loads(Path(args.compare).read_text())["findings"], all_findings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
