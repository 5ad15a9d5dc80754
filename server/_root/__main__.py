"""`python -m stridelens ...` runs the command line (used by editor clients).

`-m` puts the working directory first on sys.path, and editors start the server in the
workspace (so does CI running `python -m stridelens check .`): a workspace file named like a
module stridelens or torch imports later (`attrs.py`, `typing_extensions.py`, `sympy.py`...)
would run inside stridelens. That entry goes before anything else is imported.
"""

import os
import sys


def _drop_working_directory() -> None:
    if not sys.path or getattr(sys.flags, "safe_path", False):  # python -P: nothing was added
        return
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = None
    first = sys.path[0]
    if first == "" or (cwd is not None and os.path.realpath(first) == cwd):
        del sys.path[0]


_drop_working_directory()

from stridelens.server.cli import main  # noqa: E402 - after the sys.path fix, on purpose

raise SystemExit(main())
