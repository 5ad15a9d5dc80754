"""`stridelens check PATH...`: lint files for PyTorch memory pitfalls (for CI, like ruff).

Exit codes: 0 clean, 1 findings (or fixes to show with --diff), 2 usage/IO error (the other
files are still analysed and reported). Files are analysed in parallel across cores; each
is first analysed symbolically (no torch import) and replayed on meta tensors only when the
exact layout can change a rule's answer (see `stridelens.server.rules.gate`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from stridelens import __version__, i18n
from stridelens.i18n import ntr, tr
from stridelens.server.analysis import (
    DEFAULT_BUDGET_STEPS,
    SourceError,
    analyze_source,
    collector,
    read_source_text,
)
from stridelens.server.analysis.parsing import parse_tolerant
from stridelens.server.analysis.replay import torch_importable
from stridelens.server.notebook import (
    NOTEBOOK_SUFFIX,
    NotebookError,
    NotebookProgram,
    finding_in_cell,
    python_lines,
    read_notebook,
    write_cells,
)
from stridelens.server.rules.base import Finding, Severity

EXCLUDED_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", ".venv", "venv", ".env", "env", "node_modules", "build", "dist",
        "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".tox", ".nox", ".eggs",
        "site-packages", "_build", "buck-out", "__pypackages__",
    }
)  # fmt: skip
PYTHON_SUFFIXES = (".py", ".pyi", ".ipynb")
# Per file and pass: statements interpreted (a count of work, the same on every machine).
BUDGET_STEPS = DEFAULT_BUDGET_STEPS


def register(commands: Any) -> None:
    sub = commands.add_parser(
        "check",
        help=tr("lint files for PyTorch memory pitfalls (the rules: `stridelens rule --all`)"),
        description=tr("Lint Python files or directories for PyTorch memory pitfalls. Exit 0 when "
        "clean, 1 when there are findings, 2 on a usage or IO error (other files are still checked)."),
    )
    sub.add_argument("paths", nargs="+", metavar="PATH", help=tr("files or directories (walked recursively)"))
    sub.add_argument("--format", choices=("text", "json", "sarif"), default="text", help=tr(
        "text for people; json (an array of findings, always in English) or sarif 2.1.0 for tools "
        "and code-scanning UIs"))
    sub.add_argument("--select", metavar="CODES", help=tr(
        "comma-separated codes or prefixes (SL1,SL203), or ALL; they may name rules that are off by "
        "default (default: the rules on by default, see `stridelens rule --all`)"))
    sub.add_argument("--ignore", metavar="CODES", help=tr("comma-separated codes or prefixes to skip"))
    sub.add_argument("--fix", action="store_true", help=tr("apply safe fixes in place"))
    sub.add_argument("--unsafe-fixes", action="store_true", help=tr("with --fix/--diff: also apply fixes that change behaviour"))
    sub.add_argument("--diff", action="store_true", help=tr("show the fixes as a unified diff, write nothing"))
    sub.add_argument("-j", "--jobs", type=int, default=0, help=tr("worker processes (default: all cores)"))
    sub.add_argument("--no-config", action="store_true", help=tr("ignore [tool.stridelens] in pyproject.toml"))
    sub.add_argument("--budget", type=int, metavar="STATEMENTS",
                     help=tr("statements each file's analysis may interpret (default {default}; 0: no limit)").format(
                         default=DEFAULT_BUDGET_STEPS))
    sub.set_defaults(handler=run)


# ------------------------------------------------------------------------------ files
class UsageError(Exception):
    pass


def collect_files(paths: Iterable[str], exclude: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """Python files under `paths` (sorted, unique) and one error line per bad path."""
    files: list[str] = []
    errors: list[str] = []
    extra = [e.strip("/") for e in exclude if e.strip("/")]
    for path in paths:
        if not os.path.exists(path):
            errors.append(tr("{path}: no such file or directory").format(path=path))
        elif os.path.isdir(path):
            found = list(_walk(path, extra))
            if not found:
                errors.append(tr("{path}: no Python files in this directory").format(path=path))
            files.extend(found)
        elif not path.endswith(PYTHON_SUFFIXES):
            errors.append(tr("{path}: not a Python file (expected .py or .ipynb)").format(path=path))
        else:
            files.append(path)
    seen: set[str] = set()
    unique = []
    for f in files:
        key = os.path.normpath(f)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return sorted(unique), errors


def _walk(root: str, extra: list[str]) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in EXCLUDED_DIRS
            and not d.endswith(".egg-info")
            and not (d.startswith(".") and d not in (".", ".."))
            and not _excluded(os.path.join(dirpath, d), extra)
        )
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if name.endswith(PYTHON_SUFFIXES) and not _excluded(full, extra):
                yield full


def _excluded(path: str, extra: list[str]) -> bool:
    if not extra:
        return False
    norm = os.path.normpath(path).replace(os.sep, "/")
    return any(norm == e or norm.endswith("/" + e) or f"/{e}/" in f"/{norm}/" for e in extra)


# --------------------------------------------------------------------------- analysis
@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    source: str | None = None  # kept when fixes are wanted
    encoding: str = "utf-8"  # the file's (PEP 263): fixes are written back in it
    replayed: bool = False
    notebook: NotebookProgram | None = None  # findings are in its program's lines until shown
    timed_out: bool = False  # the analysis stopped at its budget: later code has no findings


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] | None
    ignore: tuple[str, ...]
    severity: tuple[tuple[str, Severity], ...]
    keep_source: bool
    no_grad_functions: tuple[str, ...] = ()
    # Messages' language, set again in each worker process (a spawned one starts in English).
    language: str = i18n.ENGLISH
    budget_steps: int | None = None  # None: BUDGET_STEPS; 0: no limit

    def budget(self) -> int | None:
        """Statements per pass, None for no limit."""
        if self.budget_steps is None:
            return BUDGET_STEPS
        return self.budget_steps or None


def check_file(path: str, settings: Settings) -> FileResult:
    from stridelens.server.rules import run_rules
    from stridelens.server.rules.gate import needs_replay

    notebook: NotebookProgram | None = None
    encoding = "utf-8"
    if i18n.language() != settings.language:
        i18n.set_language(settings.language)
    try:
        if path.endswith(NOTEBOOK_SUFFIX):
            notebook = read_notebook(path)
            source = notebook.source
        else:
            read = read_source_text(path)
            source, encoding = read.text, read.encoding
    except (SourceError, NotebookError) as err:
        return FileResult(path, error=str(err))
    budget = settings.budget()
    try:
        analysis = analyze_source(source, path, replay=False, budget_steps=budget)
        replayed = False
        if needs_replay(analysis):
            analysis = analyze_source(source, path, replay=True, budget_steps=budget)
            replayed = True
        findings = run_rules(
            analysis, settings.select, settings.ignore, dict(settings.severity), settings.no_grad_functions
        )
        if notebook is not None:
            findings = _cell_syntax_errors(notebook, findings, dict(settings.severity))
    except Exception as err:  # noqa: BLE001 - one bad file must not stop the others
        text = tr("{path}: internal error while analysing: {error}").format(path=path, error=f"{type(err).__name__}: {err}")
        return FileResult(path, error=text)
    return FileResult(path, findings, source=source if settings.keep_source else None, encoding=encoding,
                      replayed=replayed, notebook=notebook, timed_out=analysis.timed_out)


def _cell_syntax_errors(program: NotebookProgram, findings: list[Finding], severity: dict[str, Severity]) -> list[Finding]:
    """`findings` with the syntax errors of each cell parsed alone, as Jupyter compiles a cell
    (the errors of the cells joined into one program name that program's lines, and a cell
    left open would run into the next one). In program lines, like the other findings."""
    from stridelens.server.rules.syntax import CODE, syntax_findings

    out = [f for f in findings if f.code != CODE]
    first = 1  # the cell's first line in the program
    for cell in program.cells:
        python, _ = python_lines(cell.lines)
        parsed = parse_tolerant("\n".join(python) + "\n")
        for f in syntax_findings(program.path, parsed.lines, parsed.broken):
            level = severity.get(CODE, f.severity)
            out.append(replace(f, line=f.line + first - 1, end_line=f.end_line + first - 1, severity=level))
        first += len(cell.lines)
    out.sort(key=lambda f: (f.line, f.col, f.code, f.end_line, f.end_col))
    return out


def _check_chunk(args: tuple[list[str], Settings]) -> list[FileResult]:
    paths, settings = args
    return [check_file(p, settings) for p in paths]


def check_files(files: list[str], settings: Settings, jobs: int) -> list[FileResult]:
    collector.collect_less_often()  # forked workers inherit it (see analysis/collector.py)
    if jobs <= 0:
        jobs = os.cpu_count() or 1
    jobs = min(jobs, len(files))
    if jobs <= 1:
        return [check_file(p, settings) for p in files]
    # Interleaved chunks: big and small files spread over the workers; few round trips.
    per_worker = max(1, min(16, len(files) // (jobs * 4) or 1))
    chunks = [files[i : i + per_worker] for i in range(0, len(files), per_worker)]
    results: list[FileResult] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for chunk_result in pool.map(_check_chunk, [(c, settings) for c in chunks]):
            results.extend(chunk_result)
    return results


# ------------------------------------------------------------------------------ output
def _fix_diff(result: FileResult, fixed: str) -> str:
    """The fix as a unified diff: of the file, or of each changed cell of a notebook."""
    assert result.source is not None
    if result.notebook is None:
        return "".join(
            difflib.unified_diff(
                result.source.splitlines(keepends=True),
                fixed.splitlines(keepends=True),
                fromfile=_diff_label("a", result.path),
                tofile=_diff_label("b", result.path),
            )
        )
    program = result.notebook
    out = []
    for index, new_lines in sorted(program.cells_after(fixed).items()):
        cell = program.cells[index]
        out.append(
            "".join(
                difflib.unified_diff(
                    [line + "\n" for line in cell.lines],
                    [line + "\n" for line in new_lines],
                    fromfile=_diff_label("a", result.path) + f":cell {cell.number}",
                    tofile=_diff_label("b", result.path) + f":cell {cell.number}",
                )
            )
        )
    return "".join(out)


def _write_fixed(result: FileResult, fixed: str) -> None:
    if result.notebook is not None:
        write_cells(result.notebook, result.notebook.cells_after(fixed))
        return
    data = fixed.encode(result.encoding)  # before the file is opened: a failure leaves it whole
    with open(result.path, "wb") as handle:
        handle.write(data)


def _diff_label(side: str, path: str) -> str:
    """`a/pkg/mod.py` for a relative path, as git writes it; an absolute path as it is
    (`a//tmp/x.py` reads as a typo, and `patch -p1` would strip the wrong part)."""
    return path if os.path.isabs(path) else f"{side}/{path}"


def _sort_key(f: Finding) -> tuple[str, int, int, int, str]:
    return (f.path, f.cell or 0, f.line, f.col, f.code)


Sources = dict[str | tuple[str, int], list[str]]  # a file's lines, or a notebook cell's by (path, cell)


def location(f: Finding) -> str:
    """`path:line:col`, or `nb.ipynb:cell 3:2:5` in a notebook."""
    return f"{f.path}:cell {f.cell}:{f.line}:{f.col}" if f.cell is not None else f"{f.path}:{f.line}:{f.col}"


def render_text(findings: list[Finding], sources: Sources) -> str:
    out: list[str] = []
    for f in findings:
        out.append(f"{location(f)}: {f.code} {f.message}")
        lines = sources.get((f.path, f.cell) if f.cell is not None else f.path)
        if lines and 1 <= f.line <= len(lines):
            text = lines[f.line - 1].rstrip("\n").expandtabs(1)
            end = min(f.end_col if f.end_line == f.line else len(text) + 1, len(text) + 1)
            # The caret under the code in terminal columns: CJK characters and most emoji take two.
            width = max(1, i18n.columns(text[f.col - 1 : end - 1]))
            gutter = f"{f.line} | "
            out.append(f"  {gutter}{text}")
            out.append("  " + " " * len(gutter) + " " * i18n.columns(text[: f.col - 1]) + "^" * width)
        if f.fix is not None:
            unsafe = "" if f.fix.safe else tr(" (unsafe: --fix --unsafe-fixes)")
            out.append(tr("  = fix: {title}").format(title=f.fix.title) + unsafe)
        out.append("")
    return "\n".join(out)


def render_sarif(findings: list[Finding], notebooks: dict[str, NotebookProgram] | None = None) -> dict[str, Any]:
    """SARIF 2.1.0. A notebook finding's region is the line of the .ipynb file that holds it
    (lines only: columns inside a JSON string would mislead), with its cell in `properties`."""
    from stridelens.server.rules import ALL_RULES

    codes = sorted(ALL_RULES)
    level = {
        Severity.ERROR: "error",
        Severity.WARNING: "warning",
        Severity.INFORMATION: "note",
        Severity.HINT: "note",
    }
    rules = []
    for code in codes:
        rule = ALL_RULES[code]
        rules.append(
            {
                "id": code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": rule.doc.what},
                "help": {"text": f"{rule.doc.why}\n\nFix: {rule.doc.fix}"},
                "helpUri": rule.url,
                # SARIF's `enabled`: whether the rule runs when nothing is selected.
                "defaultConfiguration": {"level": level[rule.severity], "enabled": rule.default},
            }
        )
    results = []
    for f in findings:
        program = notebooks.get(f.path) if notebooks and f.cell is not None else None
        region: dict[str, Any] = {"startLine": f.line, "startColumn": f.col, "endLine": f.end_line, "endColumn": f.end_col}
        if program is not None and f.cell is not None:
            region = {"startLine": program.json_line(f.cell, f.line), "endLine": program.json_line(f.cell, f.end_line)}
        result: dict[str, Any] = {
            "ruleId": f.code,
            "ruleIndex": codes.index(f.code) if f.code in codes else -1,
            "level": level[f.severity],
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": f.path.replace(os.sep, "/"), "uriBaseId": "%SRCROOT%"},
                        "region": region,
                    }
                }
            ],
        }
        if f.cell is not None:
            result["properties"] = {"cell": f.cell, "cellLine": f.line, "cellColumn": f.col}
        if f.fix is not None and f.cell is None:  # a cell edit is no edit of the .ipynb text
            result["fixes"] = [
                {
                    "description": {"text": f.fix.title},
                    "artifactChanges": [
                        {
                            "artifactLocation": {"uri": f.path.replace(os.sep, "/"), "uriBaseId": "%SRCROOT%"},
                            "replacements": [
                                {
                                    "deletedRegion": {
                                        "startLine": e.line,
                                        "startColumn": e.col,
                                        "endLine": e.end_line,
                                        "endColumn": e.end_col,
                                    },
                                    "insertedContent": {"text": e.new_text},
                                }
                                for e in f.fix.edits
                            ],
                        }
                    ],
                }
            ]
        results.append(result)
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "stridelens",
                        "version": __version__,
                        "informationUri": "https://stridelens.invalid",
                        "rules": rules,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


# -------------------------------------------------------------------------------- run
def _split_codes(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c.strip().upper() for c in value.split(",") if c.strip()]


def _validate_codes(codes: list[str] | None, flag: str) -> None:
    from stridelens.server.rules import ALL_RULES

    for code in codes or ():
        if code != "ALL" and not any(rule.startswith(code) for rule in ALL_RULES):
            raise UsageError(tr("{flag}: unknown rule code {code!r} (see `stridelens rule --all`)").format(flag=flag, code=code))


def run(args: argparse.Namespace) -> int:
    from stridelens.server.config import ProjectConfig, load_project_config
    from stridelens.server.rules import ALWAYS_REPORTED
    from stridelens.server.rules.fixes import apply_fixes

    def err(message: str) -> None:
        print(tr("stridelens check: {message}").format(message=message), file=sys.stderr)

    select = _split_codes(args.select)
    ignore = _split_codes(args.ignore)
    try:
        _validate_codes(select, "--select")
        _validate_codes(ignore, "--ignore")
    except UsageError as error:
        err(str(error))
        return 2
    if args.jobs < 0:
        err(tr("--jobs must be 0 (all cores) or more"))
        return 2
    if args.budget is not None and not args.budget >= 0:
        err(tr("--budget must be 0 (no limit) or more statements"))
        return 2
    config = ProjectConfig() if args.no_config else load_project_config(args.paths[0] if os.path.exists(args.paths[0]) else os.getcwd())
    for problem in config.problems:
        err(tr("config: {problem}").format(problem=problem))
    if select is None:
        select = config.select
    select = ["SL" if c == "ALL" else c for c in select] if select else None
    all_ignore = [*config.ignore, *(ignore or [])]
    for code in sorted(ALWAYS_REPORTED):
        if any(code.startswith(c) for c in all_ignore):
            err(tr("note: {code} (syntax error) is reported whatever `ignore` says: a file Python cannot parse "
                   "does not pass").format(code=code))
    settings = Settings(
        select=tuple(select) if select else None,
        ignore=tuple(all_ignore),
        severity=tuple(sorted(config.severity.items())),
        keep_source=True,
        no_grad_functions=tuple(config.no_grad_functions),
        # JSON and SARIF are the machine interface: the same bytes in every locale.
        language=i18n.language() if args.format == "text" else i18n.ENGLISH,
        budget_steps=args.budget,
    )
    files, errors = collect_files(args.paths, config.exclude)
    failed = bool(errors)
    for message in errors:
        err(message)
    chosen = i18n.language()
    results = check_files(files, settings, args.jobs) if files else []
    i18n.set_language(chosen)  # the findings of JSON output were made in English
    findings: list[Finding] = []
    sources: Sources = {}
    diffs: list[str] = []
    fixed_count = 0
    for result in results:
        if result.error is not None:
            err(result.error)
            failed = True
            continue
        remaining = result.findings
        if (args.fix or args.diff) and result.source is not None:
            outcome = apply_fixes(result.source, result.findings, unsafe=args.unsafe_fixes)
            if outcome.applied:
                applied = {id(f) for f in outcome.applied}
                try:
                    if args.diff:
                        diffs.append(_fix_diff(result, outcome.source))
                    else:
                        _write_fixed(result, outcome.source)
                        fixed_count += len(applied)
                        remaining = [f for f in result.findings if id(f) not in applied]
                except NotebookError as error:
                    err(str(error))
                    failed = True
                except OSError as error:
                    err(tr("{path}: cannot write fixes: {error}").format(path=result.path, error=error.strerror or error))
                    failed = True
                except UnicodeEncodeError as error:
                    err(tr("{path}: cannot write fixes: the fixed text has {char!r}, which its encoding {encoding} "
                           "cannot hold").format(path=result.path, char=error.object[error.start : error.end],
                                                 encoding=result.encoding))
                    failed = True
        if result.notebook is not None:
            program = result.notebook
            remaining = [finding_in_cell(program, f) for f in remaining]
            for cell in program.cells:
                sources[(result.path, cell.number)] = cell.lines
        elif result.source is not None:
            sources[result.path] = result.source.splitlines()
        findings.extend(remaining)
    findings.sort(key=_sort_key)
    for result in results:
        if result.timed_out:  # on stderr, as the note below: stdout stays the findings
            err(tr("note: {path}: the analysis stopped at its budget ({steps} statements interpreted), so code "
                   "after that point has no findings; `--budget STATEMENTS` gives it more (0: no limit)").format(
                path=result.path, steps=settings.budget()))
    if any(r.replayed for r in results) and not torch_importable():
        err(
            tr(
                "note: torch is not installed for this interpreter, so no op was replayed: facts only "
                "torch can give (concrete shapes and strides of tensors built from literal sizes) are "
                "unknown and findings that need them are missed; symbolic findings are unaffected. "
                "Install torch here for exact facts."
            )
        )

    if args.diff:
        sys.stdout.write("".join(diffs))
        if diffs:
            print(ntr("Would fix {n} file.", "Would fix {n} files.", len(diffs)).format(n=len(diffs)), file=sys.stderr)
        return 2 if failed else (1 if diffs else 0)

    if args.format == "json":
        print(json.dumps([f.to_json() for f in findings], indent=2))
    elif args.format == "sarif":
        notebooks = {r.path: r.notebook for r in results if r.notebook is not None}
        print(json.dumps(render_sarif(findings, notebooks), indent=2))
    else:
        if findings:
            sys.stdout.write(render_text(findings, sources))
            # No fix is applied to a file with a syntax error (its fixed text would not parse).
            broken = {f.path for f in findings if f.code in ALWAYS_REPORTED}
            fixable = sum(1 for f in findings if f.fix is not None and f.fix.safe and f.path not in broken)
            summary = ntr("Found {n} finding", "Found {n} findings", len(findings)).format(n=len(findings))
            if fixed_count:
                summary += tr(" ({n} fixed)").format(n=fixed_count)
            if fixable:
                summary += tr("; {n} fixable with `stridelens check --fix`").format(n=fixable)
            print(summary + tr("."))
        elif fixed_count:
            print(ntr("Fixed {n} finding; nothing left.", "Fixed {n} findings; nothing left.", fixed_count).format(n=fixed_count))
        elif not failed:
            print(tr("All checks passed!"))
    if failed:
        return 2
    return 1 if findings else 0
