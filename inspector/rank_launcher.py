"""Start one torchrun worker under debugpy: `torchrun ... rank_launcher.py [-m MODULE | SCRIPT] ARGS`.

`stridelens inspect --all-ranks --launch -- torchrun ...` puts this file where the training
script was. Each worker then listens on its own free loopback port, writes that port to
`$STRIDELENS_RANK_DIR/rank-<RANK>.json`, waits for stridelens to connect and set its
breakpoints, and runs the user's script as `python SCRIPT ARGS` would.

It is run by path (not `-m stridelens...`) and imports only the standard library and
debugpy, so the workers' interpreter needs debugpy but not stridelens.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

DIR_ENV = "STRIDELENS_RANK_DIR"


def N_(message: str) -> str:
    """Marks an English template for the catalogue (no stridelens import here; see probe.N_)."""
    return message


def _write(directory: str, rank: str, info: dict[str, object]) -> None:
    path = os.path.join(directory, f"rank-{rank}.json")
    tmp = path + f".{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)  # the CLI never reads a half-written file


def main(argv: list[str]) -> None:
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        sys.exit("rank_launcher: expected SCRIPT [ARGS] or -m MODULE [ARGS]")
    module = argv[1] if argv[0] == "-m" else None
    target = argv[1:] if module else argv
    # Python put this file's folder first on sys.path; the user's script expects its own.
    sys.path[0] = os.getcwd() if module else os.path.dirname(os.path.abspath(target[0]))
    # Popped so that processes the script starts (DataLoader workers...) do not wait for us.
    directory = os.environ.pop(DIR_ENV, None)
    env = os.environ
    rank = env.get("RANK", env.get("LOCAL_RANK", "0"))
    info: dict[str, object] = {
        "pid": os.getpid(), "rank": int(rank), "local_rank": int(env.get("LOCAL_RANK", "0")),
        "world_size": int(env.get("WORLD_SIZE", "1")),
        "local_world_size": int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", "1"))),
    }
    if directory:
        try:
            import debugpy
        except ImportError as e:
            _write(directory, rank, {**info, "error": N_("debugpy is not importable by {python}: {error}").format(
                python=sys.executable, error=e)})
            raise SystemExit(1) from e
        # Loopback, a port the OS picks. The adapter runs inside the worker: one process per
        # rank instead of two (a separate adapter is a Python start-up each, on every rank).
        _host, port = debugpy.listen(("127.0.0.1", 0), in_process_debug_adapter=True)
        _write(directory, rank, {**info, "port": port})
        debugpy.wait_for_client()
    sys.argv = list(target)
    if module:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        # An absolute code filename: debugpy matches breakpoints by absolute path.
        runpy.run_path(os.path.abspath(target[0]), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
