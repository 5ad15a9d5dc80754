"""Runs stridelens from the VS Code extension with the user's interpreter.

    python launch.py ARGS...   is   python -m stridelens ARGS...   with bundled/libs on sys.path
    python launch.py --info    prints, as JSON, what this interpreter has (the extension's check)
    python launch.py --analyze KIND   a probe's answer (JSON on stdin) as the report of
                               `inspect --grads` (KIND grads), `--cuda-summary` (cuda-summary) or
                               `--diff-steps` (diff-steps): the memory panel's sections, analysed
                               by stridelens' own code
    python launch.py --from-target    a JSON list of texts the probe wrote (English) in the
                               user's language, as `inspect` shows them (inspector/target_text.py)

STRIDELENS_LANG (the extension's language: "en", "zh-cn") is the language of what --analyze and
--from-target write; it is taken out of the environment, so nothing the server starts sees it.

The extension carries stridelens and its pure-Python dependencies in bundled/libs (filled by
scripts/bundle.py when the .vsix is packaged); the interpreter only needs torch, for exact
facts. STRIDELENS_IMPORT_STRATEGY (the `stridelens.importStrategy` setting) says which copy
wins when the interpreter has its own stridelens:
  useBundled (default)  bundled/libs goes first on sys.path: the copy this extension was built with;
  fromEnvironment       the interpreter's stridelens (with its pygls, ...) when it can import one,
                        the bundled copy, as above, otherwise.
Older Pythons must be able to read this file far enough to say they are too old: no syntax
newer than Python 3.0 here.
"""

import os
import sys

TOO_OLD = 3  # exit code: this Python is older than stridelens supports
# --analyze KIND: the module whose analyze() builds that report from the probe's answer.
ANALYZERS = {"grads": "stridelens.inspector.grad_reports", "cuda-summary": "stridelens.inspector.cuda_report",
             "diff-steps": "stridelens.inspector.step_diff"}
LIBS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "libs")


def _find(name, path):
    import importlib.machinery

    spec = importlib.machinery.PathFinder.find_spec(name, path)
    return spec.origin if spec is not None else None


def _probe_parts(probe_file):
    try:
        from stridelens.inspector import probe_parts
    except ImportError:  # a stridelens from before the probe was split: one file
        return [[probe_file, "<stridelens-probe>"]]
    return [list(part) for part in zip(probe_parts.FILES, probe_parts.FILENAMES)]


def _importable(name):
    import importlib.util

    try:  # meta path finders too: an editable install is one
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _use_language(tag):
    """Messages in `tag`'s language (a stridelens without the catalogue: English)."""
    if not tag:
        return
    try:
        from stridelens import i18n
    except ImportError:
        return
    i18n.set_language(tag)


def main():
    if sys.version_info < (3, 10):
        sys.stderr.write(
            "stridelens needs Python 3.10 or newer; %s is Python %s\n"
            % (sys.executable, ".".join(str(v) for v in sys.version_info[:3]))
        )
        return TOO_OLD
    # Not this folder (sys.path[0] for a script): nothing of it is meant to be imported.
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    own_path = list(sys.path)  # the interpreter's own, before the bundle joins
    strategy = os.environ.pop("STRIDELENS_IMPORT_STRATEGY", "useBundled")
    language = os.environ.pop("STRIDELENS_LANG", "")
    bundled = os.path.isdir(os.path.join(LIBS, "stridelens"))
    if bundled and not (strategy == "fromEnvironment" and _importable("stridelens")):
        sys.path.insert(0, LIBS)
    args = sys.argv[1:]
    if args == ["--info"]:
        import json

        try:
            import stridelens
            import stridelens.inspector.probe as probe
        except ImportError as e:
            print(json.dumps({"error": "stridelens is not importable: %s" % e, "python": sys.executable,
                              "bundle": LIBS if bundled else None}))
            return 1
        where = os.path.dirname(os.path.abspath(stridelens.__file__))
        print(json.dumps({
            "version": getattr(stridelens, "__version__", "?"),
            "python": sys.executable,
            "pythonVersion": ".".join(str(v) for v in sys.version_info[:3]),
            "location": where,
            "fromBundle": where.startswith(os.path.join(LIBS, "")),
            "bundle": LIBS if bundled else None,
            "importStrategy": strategy,
            "probeFile": probe.__file__,
            # The probe's files and the filenames they run under, in running order: see probe_parts.
            "probeParts": _probe_parts(probe.__file__),
            # What the interpreter has of its own: torch is never bundled; debugpy is, but the
            # interpreter's copy (with its compiled speedups) is preferred for debugging.
            "torch": _find("torch", own_path),
            "debugpy": _find("debugpy", own_path),
            "bundledDebugpy": os.path.join(LIBS, "debugpy") if os.path.isdir(os.path.join(LIBS, "debugpy")) else None,
        }))
        return 0
    if len(args) == 2 and args[0] == "--analyze" and args[1] in ANALYZERS:
        import importlib
        import json

        _use_language(language)
        analyze = importlib.import_module(ANALYZERS[args[1]]).analyze
        print(json.dumps(analyze(json.load(sys.stdin))))
        return 0
    if args == ["--from-target"]:
        import json

        texts = json.load(sys.stdin)
        _use_language(language)
        try:
            from stridelens.inspector.target_text import from_target
        except ImportError:  # a stridelens from before the catalogue (fromEnvironment): as they came
            from_target = None
        print(json.dumps([from_target(t) if from_target is not None and isinstance(t, str) else t for t in texts]))
        return 0
    import runpy

    sys.argv = ["stridelens"] + args
    runpy.run_module("stridelens", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
