"""The server's settings: defaults <- `[tool.stridelens]` <- initializationOptions <-
`workspace/configuration` (section `stridelens`).

Keys (the same in initializationOptions and in the `stridelens` configuration section):

    select        list of rule codes / prefixes (or "ALL") to run  default []: the rules on
                  by default (a rule off by default runs only where select names it:
                  its code, a prefix of it, or ALL; stridelens.server.rules); [] in a
                  layer keeps what the layer below selects
    ignore        list of rule codes / prefixes to skip           default []
    severity      {"SL103": "warning", ...} overrides             default {}
    inlayHints    "off" | "shapes" | "strides" (shapes+strides)   default "shapes"
    recordedHints bool: where no shape is known statically, a hint shows the shape
                  `stridelens record` saw at run time, marked "(run)"; never for facts
                  recorded on another version of the file              default false
    replay        bool: exact facts from meta replay (imports torch)  default true
    debounceMs    int, 0..5000: wait after a change while an analysis runs  default 50
    locale        "en" | "zh-CN" | "auto" (or ""): messages' language   default "auto":
                  initialize's `locale`, else LC_ALL / LC_MESSAGES / LANG

Bad values never crash the server: each is reported (a message for the user) and the
default kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from stridelens import i18n
from stridelens.i18n import tr
from stridelens.server.rules import Severity

INLAY_MODES = ("off", "shapes", "strides")
SEVERITIES = {s.value: s for s in Severity}


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] = ()  # (): the default selection (rules on by default)
    ignore: tuple[str, ...] = ()
    severity: Mapping[str, Severity] = field(default_factory=dict)
    inlay_hints: str = "shapes"
    recorded_hints: bool = False
    replay: bool = True
    debounce_ms: int = 50
    no_grad_functions: tuple[str, ...] = ()  # from pyproject only
    locale: str | None = None  # a catalogue ("zh_CN", "en"); None: follow the client


# What each setting changes once it changes (`StridelensServer.pull_configuration`): the
# analysis itself (a new run), the findings chosen from an analysis and their words (the rules
# again, on the analysis at hand), or neither (inlay hints and the debounce are read when used).
REANALYSE = ("replay",)
RECHECK = ("select", "ignore", "severity", "no_grad_functions", "locale")


def changed(old: Settings, new: Settings, keys: tuple[str, ...]) -> bool:
    return any(getattr(old, key) != getattr(new, key) for key in keys)


def _codes(value: Any, key: str, problems: list[str]) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        problems.append(tr('`{key}` must be a list of rule codes (like ["SL101", "SL2"]), got {value!r}').format(key=key, value=value))
        return None
    bad = [v for v in value if not v.strip().upper().startswith("SL") and v.strip().upper() != "ALL"]
    if bad:
        problems.append(tr("`{key}`: not stridelens rule codes: {codes}").format(key=key, codes=", ".join(map(repr, bad))))
        return None
    return tuple(v.strip().upper() for v in value)


def merge_settings(base: Settings, raw: Any, source: str) -> tuple[Settings, list[str]]:
    """Apply one layer of user options to `base`; returns the settings and the problems."""
    problems: list[str] = []
    if raw is None:
        return base, problems
    if not isinstance(raw, Mapping):
        return base, [tr("{source}: expected an object of stridelens settings, got {type}").format(source=source, type=type(raw).__name__)]
    if isinstance(raw.get("stridelens"), Mapping):  # {"stridelens": {...}} as some clients send
        raw = raw["stridelens"]
    out = base
    for key, value in raw.items():
        if value is None:
            continue
        if key == "select":
            codes = _codes(value, key, problems)
            if codes:  # [] keeps the layer below: pyproject's select, else the default selection
                out = replace(out, select=codes)
        elif key == "ignore":
            codes = _codes(value, key, problems)
            if codes is not None:
                out = replace(out, ignore=codes)
        elif key == "severity":
            if not isinstance(value, Mapping):
                problems.append(tr("`severity` must map rule codes to error/warning/information/hint, got {value!r}").format(value=value))
                continue
            sev = dict(out.severity)
            for code, level in value.items():
                name = str(level).lower()
                name = {"info": "information", "warn": "warning"}.get(name, name)
                if not isinstance(code, str) or name not in SEVERITIES:
                    problems.append(
                        tr("`severity.{code}`: {level!r} is not one of error, warning, information, hint").format(
                            code=code, level=level
                        )
                    )
                    continue
                sev[code.upper()] = SEVERITIES[name]
            out = replace(out, severity=sev)
        elif key in ("inlayHints", "inlay_hints"):
            mode = value.get("mode") if isinstance(value, Mapping) else value
            if mode is False:
                mode = "off"
            if mode is True:
                mode = "shapes"
            if mode not in INLAY_MODES:
                problems.append(tr("`inlayHints` must be one of off, shapes, strides; got {value!r}").format(value=value))
                continue
            out = replace(out, inlay_hints=str(mode))
        elif key in ("recordedHints", "recorded_hints"):
            if not isinstance(value, bool):
                problems.append(tr("`recordedHints` must be true or false, got {value!r}").format(value=value))
                continue
            out = replace(out, recorded_hints=value)
        elif key == "replay":
            if not isinstance(value, bool):
                problems.append(tr("`replay` must be true or false, got {value!r}").format(value=value))
                continue
            out = replace(out, replay=value)
        elif key in ("debounceMs", "debounce_ms"):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 5000:
                problems.append(tr("`debounceMs` must be an integer from 0 to 5000, got {value!r}").format(value=value))
                continue
            out = replace(out, debounce_ms=value)
        elif key == "locale":
            if not isinstance(value, str) or (value.strip().lower() not in ("", "auto") and i18n.normalize(value) is None):
                problems.append(tr("`locale` must be one of auto, en, zh-CN; got {value!r}").format(value=value))
                continue
            out = replace(out, locale=i18n.normalize(value))
        else:
            problems.append(tr("unknown setting `{key}` (ignored)").format(key=key))
    return out, [f"{source}: {p}" if not p.startswith(source) else p for p in problems]


def project_settings(root: str | None) -> tuple[Settings, list[str]]:
    """`[tool.stridelens]` of the workspace's pyproject.toml, through the shared loader."""
    base = Settings()
    if not root:
        return base, []
    try:
        from stridelens.server import config as project_config
    except ImportError:
        return base, []
    loader = getattr(project_config, "load_project_config", None)
    if loader is None:
        return base, []
    try:
        cfg = loader(root)
    except Exception as err:  # noqa: BLE001 - a broken pyproject must not stop the server
        return base, [f"pyproject.toml: {err}"]
    if cfg is None:
        return base, []
    found = [str(p) for p in getattr(cfg, "problems", []) or []]
    raw: dict[str, Any] = {}
    for key in ("select", "ignore"):
        value = cfg.get(key) if isinstance(cfg, Mapping) else getattr(cfg, key, None)
        if value:
            raw[key] = list(value)
    sev = cfg.get("severity") if isinstance(cfg, Mapping) else getattr(cfg, "severity", None)
    if sev:
        raw["severity"] = {k: getattr(v, "value", v) for k, v in dict(sev).items()}
    settings, problems = merge_settings(base, raw, "pyproject.toml [tool.stridelens]")
    no_grad = getattr(cfg, "no_grad_functions", None)
    if no_grad:
        settings = replace(settings, no_grad_functions=tuple(no_grad))
    return settings, found + problems
