"""Compare `stridelens explain` with what the released code really does.

For each verbatim file: analyse its text (never running it), ask the engine about every
assigned name at its exact position (`Analysis.explain_at(line, col).answer()`, the JSON of
DESIGN.md "Machine-readable interfaces"), run the file for real (driver.py), and check every
field the engine states (not None) against every recorded run of that probe:

* an int entry (of `shape`, `strides`, or `storage_offset`) must equal the real value;
* a string entry is a Python expression over the names as the line starts: evaluated in the
  pre-statement locals of that run (globals: the module namespace), it must equal the real
  value; one that fails to evaluate is a wrong fact;
* `assumes`: conditions over the same names; in a run where one is False the probe's facts are
  not checked ("assumption not met", counted apart); one that fails to evaluate is wrong;
* `contiguous`, `is_view` (`_base is not None`), `requires_grad`, `dtype`, `device`: equality;
* `view_of`: evaluated in the post-statement locals, it must be the real tensor's `_base` or
  share its storage; unresolvable is wrong.

A fact is stated only when it holds in every run of the code (DESIGN.md "Real code first"), so
one run that disagrees makes the fact wrong.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from stridelens.server.analysis import analyze_source
from tests.realcode import driver
from tests.realcode.driver import (
    FILES,
    SOURCES,
    FileRun,
    Probe,
    Run,
    execute,
    probes_of,
    view_target,
)

FIELDS = (
    "shape",
    "strides",
    "storage_offset",
    "contiguous",
    "is_view",
    "view_of",
    "requires_grad",
    "dtype",
    "device",
)
SIZE_FIELDS = ("shape", "strides", "storage_offset")


@dataclass(frozen=True)
class WrongFact:
    file: str
    line: int
    name: str
    field: str
    engine: Any
    real: Any
    run: int  # index of the run of this probe (0-based)
    runs: int  # how many runs the probe had
    why: str = ""
    grad_enabled: bool = True  # the grad mode of that run

    def render(self) -> str:
        why = f" ({self.why})" if self.why else ""
        mode = "" if self.grad_enabled else ", under no_grad"
        return (
            f"{self.file}:{self.line} `{self.name}` {self.field}: engine {self.engine!r}, "
            f"real {self.real!r} [run {self.run + 1}/{self.runs}{mode}]{why}"
        )


@dataclass
class FileReport:
    name: str
    wrong: list[WrongFact] = field(default_factory=list)
    # (probe, run) observations whose real value is a tensor
    observations: int = 0
    stated: Counter[str] = field(default_factory=Counter)  # per field, over those observations
    any_stated: int = 0
    assumption_not_met: int = 0
    tensor_probes: int = 0  # probes that bound a tensor in at least one run
    answered_probes: int = 0  # of those, probes where the engine states at least one field
    probes: int = 0
    unreached: int = 0  # probes that never ran

    def wrong_by_probe(self) -> dict[tuple[int, str, str], list[WrongFact]]:
        out: dict[tuple[int, str, str], list[WrongFact]] = {}
        for w in self.wrong:
            out.setdefault((w.line, w.name, w.field), []).append(w)
        return out


# --------------------------------------------------------------------------- the engine side


def source_text(name: str) -> str:
    return (SOURCES / f"{name}.py").read_text(encoding="utf-8")


def _char_col(source_line: str, byte_col: int) -> int:
    return len(source_line.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))


def answers_of(text: str, path: Path) -> dict[Probe, dict[str, Any] | None]:
    """The engine's `explain` JSON for every probe of `text` (None: nothing known)."""
    analysis = analyze_source(text, str(path))
    lines = text.splitlines()
    out: dict[Probe, dict[str, Any] | None] = {}
    for probe in probes_of(text):
        explanation = analysis.explain_at(probe.line, _char_col(lines[probe.line - 1], probe.col))
        out[probe] = explanation.answer() if explanation is not None else None
    return out


@cache
def engine_answers(name: str) -> dict[Probe, dict[str, Any] | None]:
    """The engine's answers for a verbatim source file."""
    return answers_of(source_text(name), SOURCES / f"{name}.py")


def _stated(answer: dict[str, Any] | None) -> dict[str, Any]:
    if not answer:
        return {}
    return {f: answer[f] for f in FIELDS if answer.get(f) is not None}


def _assumes(answer: dict[str, Any] | None) -> list[str]:
    if not answer:
        return []
    return [a for a in answer.get("assumes") or [] if isinstance(a, str)]


def _expressions(answer: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """String entries to evaluate before the statement, and `view_of` after it."""
    stated = _stated(answer)
    pre: list[str] = list(_assumes(answer))
    for f in SIZE_FIELDS:
        value = stated.get(f)
        entries = value if isinstance(value, list) else [value]
        pre += [e for e in entries if isinstance(e, str)]
    post = [stated["view_of"]] if isinstance(stated.get("view_of"), str) else []
    return pre, post


@cache
def real_run(name: str) -> FileRun:
    """The file run for real, with the engine's expressions evaluated at each probe."""
    pre: dict[Probe, list[str]] = {}
    post: dict[Probe, list[str]] = {}
    for probe, answer in engine_answers(name).items():
        pre[probe], post[probe] = _expressions(answer)
    return execute(name, pre, post)


@dataclass
class SnippetOracle:
    """A test's own source, analysed as text and run for real under its entry function."""

    source: str
    answers: dict[Probe, dict[str, Any] | None]
    run: FileRun
    report: FileReport

    def answer(self, name: str, function: str | None = None) -> dict[str, Any] | None:
        """The answer for the first probe of `name` after `def function(` when given
        (`function` may spell the parameters, `"forward(self, idx)"`, to pick one of several)."""
        start = 0
        if function is not None:
            lines = self.source.splitlines()
            head = f"def {function}" if "(" in function else f"def {function}("
            start = next(i for i, t in enumerate(lines, 1) if t.lstrip().startswith(head))
        probe = next(p for p in self.answers if p.name == name and p.line > start)
        return self.answers[probe]

    def unreached(self) -> list[Probe]:
        """Probes no run of the entry reached (the entry must exercise every assignment)."""
        return [p for p, runs in self.run.runs.items() if not runs]

    def wrong_lines(self) -> list[str]:
        """One line per wrong fact, for a test's failure message."""
        return wrong_facts_summary([self.report]) if self.report.wrong else []


def snippet_suite(source: str, name: str, entry: Callable[[dict[str, Any]], None]) -> tuple[Any, Any, Any]:
    """The module-scoped `oracle` fixture of a snippet test module, and its two checks that
    every snippet test has: every probe ran, and no stated fact is wrong. Bind all three at
    module level: `oracle, test_every_probe_ran, test_no_wrong_facts = snippet_suite(...)`."""
    import pytest

    @pytest.fixture(scope="module")
    def oracle(tmp_path_factory: pytest.TempPathFactory) -> SnippetOracle:
        return snippet_oracle(source, name, entry, tmp_path_factory.mktemp(name))

    def test_every_probe_ran(oracle: SnippetOracle) -> None:
        assert not oracle.unreached(), oracle.unreached()

    def test_no_wrong_facts(oracle: SnippetOracle) -> None:
        if oracle.wrong_lines():
            pytest.fail("wrong facts:\n" + "\n".join(oracle.wrong_lines()), pytrace=False)

    return oracle, test_every_probe_ran, test_no_wrong_facts


def snippet_oracle(source: str, name: str, entry: Callable[[dict[str, Any]], None], folder: Path) -> SnippetOracle:
    """Write `source` as `folder/name.py`, ask the engine about every probe, then run it with
    `entry(namespace)` as the real-code driver runs a verbatim file, and compare."""
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    answers = answers_of(source, path)
    pre: dict[Probe, list[str]] = {}
    post: dict[Probe, list[str]] = {}
    for probe, answer in answers.items():
        pre[probe], post[probe] = _expressions(answer)
    # driver.execute runs SOURCES/<name>.py under ENTRIES[name]: point both at this snippet.
    saved_sources, saved_entry = driver.SOURCES, driver.ENTRIES.get(name)
    driver.SOURCES, driver.ENTRIES[name] = folder, entry
    try:
        run = driver.execute(name, pre, post)
    finally:
        driver.SOURCES = saved_sources
        if saved_entry is None:
            del driver.ENTRIES[name]
        else:
            driver.ENTRIES[name] = saved_entry
    return SnippetOracle(source, answers, run, check(name, answers, run))


# --------------------------------------------------------------------------- comparing


def _eval_in(run: Run, expr: str, namespace: dict[str, Any]) -> tuple[bool, Any]:
    found = run.evaluated.get(expr)
    if found is None:  # not given to the driver: evaluate lazily in the snapshot
        try:
            return True, eval(expr, namespace, dict(run.pre_locals))
        except Exception as err:  # noqa: BLE001 - a failing expression is a finding
            return False, f"{type(err).__name__}: {err}"
    return (True, found.value) if found.ok else (False, found.error)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_entry(entry: Any, real: int, run: Run, namespace: dict[str, Any]) -> str | None:
    """None when the entry holds; else why not."""
    if entry is None:
        return None
    if isinstance(entry, str):
        ok, value = _eval_in(run, entry, namespace)
        if not ok:
            return f"`{entry}` does not evaluate: {value}"
        if not _is_int(value) or value != real:
            return f"`{entry}` evaluates to {value!r}"
        return None
    if _is_int(entry):
        return None if entry == real else "differs"
    return f"not an int or a string: {type(entry).__name__}"


def _check_run(
    report: FileReport,
    probe: Probe,
    stated: dict[str, Any],
    run: Run,
    index: int,
    total: int,
    namespace: dict[str, Any],
) -> None:
    def wrong(f: str, engine: Any, real: Any, why: str = "") -> None:
        report.wrong.append(
            WrongFact(report.name, probe.line, probe.name, f, engine, real, index, total, why, run.grad_enabled)
        )

    t = run.tensor
    if t is None:
        wrong("(tensor)", {k: stated[k] for k in stated}, run.kind, "facts stated of a value that is not a tensor")
        return
    for f in ("shape", "strides"):
        if f not in stated:
            continue
        engine, real = stated[f], getattr(t, f)
        if not isinstance(engine, list) or len(engine) != len(real):
            wrong(f, engine, list(real), "rank differs")
            continue
        for i, (entry, r) in enumerate(zip(engine, real, strict=True)):
            why = _check_entry(entry, r, run, namespace)
            if why is not None:
                wrong(f, engine, list(real), f"entry {i}: {why}")
                break
    if "storage_offset" in stated:
        why = _check_entry(stated["storage_offset"], t.storage_offset, run, namespace)
        if why is not None:
            wrong("storage_offset", stated["storage_offset"], t.storage_offset, why)
    for f, real_value in (
        ("contiguous", t.contiguous),
        ("is_view", t.is_view),
        ("requires_grad", t.requires_grad),
        ("dtype", t.dtype),
    ):
        if f in stated and stated[f] != real_value:
            wrong(f, stated[f], real_value)
    if "device" in stated and stated["device"] not in (t.device, t.device_str):
        wrong("device", stated["device"], t.device_str)
    if "view_of" in stated:
        expr = stated["view_of"]
        target = None
        if isinstance(expr, str):
            target = run.view_targets.get(expr) or view_target(expr, run.value, namespace, run.post_locals)
        real_desc = "a view" if t.is_view else "not a view"
        if target is None or not target.ok:
            wrong("view_of", expr, real_desc, f"does not resolve: {target.error if target else 'not a string'}")
        elif not target.is_tensor:
            wrong("view_of", expr, real_desc, f"names a {target.kind}, not a tensor")
        elif not (target.is_base or target.same_storage):
            wrong("view_of", expr, real_desc, f"`{expr}` is neither its _base nor shares its storage")


def check_file(name: str) -> FileReport:
    """The engine's answers on the file against its real runs."""
    return check(name, engine_answers(name), real_run(name))


def check(name: str, answers: dict[Probe, dict[str, Any] | None], file_run: FileRun) -> FileReport:
    """`answers` (explain JSON per probe) against the runs in `file_run`. Expressions the run
    did not evaluate at its probes are evaluated afterwards in the recorded snapshots."""
    namespace = file_run.namespace
    report = FileReport(name, probes=len(file_run.probes))
    for probe in file_run.probes:
        runs = file_run.runs[probe]
        answer = answers.get(probe)
        stated = _stated(answer)
        assumes = _assumes(answer)
        if not runs:
            report.unreached += 1
            continue
        if any(r.tensor is not None for r in runs):
            report.tensor_probes += 1
            report.answered_probes += bool(stated)
        for index, run in enumerate(runs):
            if run.tensor is not None:
                report.observations += 1
                report.stated.update(stated.keys())
                report.any_stated += bool(stated)
            if not stated:
                continue
            met = True
            for condition in assumes:
                ok, value = _eval_in(run, condition, namespace)
                if not ok:
                    report.wrong.append(
                        WrongFact(
                            name, probe.line, probe.name, "assumes", condition, value, index, len(runs),
                            "does not evaluate", run.grad_enabled,
                        )
                    )
                    met = False
                elif not value:
                    met = False
            if not met:
                report.assumption_not_met += 1
                continue
            _check_run(report, probe, stated, run, index, len(runs), namespace)
    return report


@cache
def report_of(name: str) -> FileReport:
    return check_file(name)


def all_reports() -> list[FileReport]:
    return [report_of(name) for name in FILES]


# --------------------------------------------------------------------------- summaries


def wrong_facts_summary(reports: list[FileReport]) -> list[str]:
    """One line per (file, line, name, field): the first disagreeing run and how many did."""
    out = []
    for report in reports:
        for (_line, _name, _field), ws in report.wrong_by_probe().items():
            first = ws[0]
            no_grad = sum(not w.grad_enabled for w in ws)
            out.append(f"{first.render()}; {len(ws)} of {first.runs} runs wrong ({no_grad} under no_grad)")
    return out


def coverage_rows(reports: list[FileReport]) -> list[tuple[str, dict[str, str]]]:
    """Per file and in total: for each field, stated / tensor observations."""

    def row(rs: list[FileReport]) -> dict[str, str]:
        total = sum(r.observations for r in rs)
        cells = {"obs": str(total)}
        for f in FIELDS:
            cells[f] = f"{sum(r.stated[f] for r in rs)}/{total}"
        cells["any"] = f"{sum(r.any_stated for r in rs)}/{total}"
        cells["probes"] = f"{sum(r.answered_probes for r in rs)}/{sum(r.tensor_probes for r in rs)}"
        cells["assume_unmet"] = str(sum(r.assumption_not_met for r in rs))
        cells["wrong"] = str(len({(r.name, w.line, w.name, w.field) for r in rs for w in r.wrong}))
        return cells

    rows = [(r.name, row([r])) for r in reports]
    rows.append(("TOTAL", row(reports)))
    return rows


def coverage_table(reports: list[FileReport]) -> str:
    rows = coverage_rows(reports)
    columns = ["obs", *FIELDS, "any", "probes", "assume_unmet", "wrong"]
    header = ["file", *columns]
    body = [[name, *(cells[c] for c in columns)] for name, cells in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body, strict=True)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    lines = [fmt(header), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in body]
    legend = (
        "obs: (probe, run) observations whose value is a tensor; a field's cell: how many of them "
        "the engine states that field for; any: at least one field; probes: tensor probes with "
        "at least one stated field / tensor probes; assume_unmet: checked observations skipped "
        "because an `assumes` was False; wrong: distinct (line, name, field) wrong facts."
    )
    return "\n".join([*lines, "", legend])


# --------------------------------------------------------------------------- provenance

_ORIGIN_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|.*\|\s*`([0-9a-f]{64})`\s*\|\s*$")


def recorded_hashes() -> dict[str, str]:
    """file name -> sha256 as listed in sources/ORIGINS.md."""
    out = {}
    for line in (SOURCES / "ORIGINS.md").read_text(encoding="utf-8").splitlines():
        m = _ORIGIN_ROW.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def sha256_of(file_name: str) -> str:
    return hashlib.sha256((SOURCES / file_name).read_bytes()).hexdigest()
