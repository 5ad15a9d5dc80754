"""Project configuration: `[tool.stridelens]` in the nearest pyproject.toml.

    [tool.stridelens]
    select = ["SL1", "SL2"]        # codes, prefixes or "ALL" (default: the rules on by default;
                                   # a rule off by default runs where select names it or a prefix)
    ignore = ["SL103"]
    exclude = ["legacy/"]           # extra path parts skipped by `stridelens check`
    no-grad-functions = ["eval_step"]  # methods your framework calls with grad disabled
    [tool.stridelens.severity]
    SL208 = "warning"

Shared by `stridelens check` and the language server. Bad values never crash: they are
reported in `ProjectConfig.problems` (one clear line each) and ignored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import tomllib

from stridelens.server.rules.base import Severity

_SEVERITIES = {s.value: s for s in Severity}
_SEVERITIES.update({"info": Severity.INFORMATION, "warn": Severity.WARNING})


@dataclass
class ProjectConfig:
    path: str | None = None  # the pyproject.toml read, if any
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    severity: dict[str, Severity] = field(default_factory=dict)
    # Function/method names run with grad disabled by a framework (SL204, SL206, SL201).
    no_grad_functions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def find_pyproject(start_dir: str) -> str | None:
    current = os.path.abspath(start_dir)
    if os.path.isfile(current):
        current = os.path.dirname(current)
    while True:
        candidate = os.path.join(current, "pyproject.toml")
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _known_prefix(code: str) -> bool:
    from stridelens.server.rules import ALL_RULES

    return any(rule.startswith(code) for rule in ALL_RULES) or code == "ALL"


def _codes(value: Any, key: str, where: str, problems: list[str]) -> list[str] | None:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"{where}: [tool.stridelens] {key} must be a list of rule codes, got {value!r}")
        return None
    codes = []
    for raw in value:
        code = raw.strip().upper()
        if not _known_prefix(code):
            problems.append(f"{where}: [tool.stridelens] {key}: unknown rule code {raw!r} (ignored)")
            continue
        codes.append("SL" if code == "ALL" else code)
    return codes


def parse_config(data: dict[str, Any], where: str) -> ProjectConfig:
    config = ProjectConfig(path=where)
    section = data.get("tool", {}).get("stridelens") if isinstance(data.get("tool"), dict) else None
    if section is None:
        return config
    if not isinstance(section, dict):
        config.problems.append(f"{where}: [tool.stridelens] must be a table")
        return config
    for key, value in section.items():
        if key == "select":
            config.select = _codes(value, key, where, config.problems)
        elif key == "ignore":
            config.ignore = _codes(value, key, where, config.problems) or []
        elif key == "exclude":
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                config.exclude = list(value)
            else:
                config.problems.append(f"{where}: [tool.stridelens] exclude must be a list of strings")
        elif key == "no-grad-functions":
            if isinstance(value, list) and all(isinstance(v, str) and v.isidentifier() for v in value):
                config.no_grad_functions = list(value)
            else:
                config.problems.append(
                    f"{where}: [tool.stridelens] no-grad-functions must be a list of function names, got {value!r}"
                )
        elif key == "severity":
            if not isinstance(value, dict):
                config.problems.append(f"{where}: [tool.stridelens.severity] must be a table of CODE = \"level\"")
                continue
            for code, level in value.items():
                from stridelens.server.rules import ALL_RULES

                if code.upper() not in ALL_RULES:
                    config.problems.append(f"{where}: [tool.stridelens.severity]: unknown rule code {code!r} (ignored)")
                elif not isinstance(level, str) or level.lower() not in _SEVERITIES:
                    config.problems.append(
                        f"{where}: [tool.stridelens.severity] {code} = {level!r}: expected one of "
                        "error, warning, information, hint (ignored)"
                    )
                else:
                    config.severity[code.upper()] = _SEVERITIES[level.lower()]
        else:
            config.problems.append(f"{where}: [tool.stridelens]: unknown key {key!r} (ignored)")
    return config


def load_project_config(start_dir: str) -> ProjectConfig:
    """The configuration from the nearest pyproject.toml at or above `start_dir`."""
    path = find_pyproject(start_dir)
    if path is None:
        return ProjectConfig()
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as err:
        return ProjectConfig(path=path, problems=[f"{path}: cannot read: {err.strerror or err}"])
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        return ProjectConfig(path=path, problems=[f"{path}: not valid TOML: {err}"])
    return parse_config(data, path)
