"""Finding the workers of a torchrun job: a rewritten torchrun command (launch) or /proc (attach).

Launch: the training script in `torchrun OPTS SCRIPT ARGS` is replaced by `rank_launcher.py`,
which starts each worker under debugpy and writes its port to a private folder. Parsing
torchrun's options here (not with torch's own parser) keeps `import torch` out of the CLI;
`tests/inspector/test_all_ranks.py` checks the option table against torch's parser.

Attach: a worker is a process whose environment (as torchrun started it) has `LOCAL_RANK`;
the workers of a job are the agent's children that have it.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from stridelens.i18n import N_, tr
from stridelens.inspector import rank_launcher
from stridelens.inspector.session import InspectError, UsageError

# torchrun options that take no value (torch 2.13 `torch.distributed.run.get_args_parser()`).
TORCHRUN_FLAGS = frozenset({
    "-h", "--help", "--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path",
    "--run_path", "--virtual-local-rank", "--virtual_local_rank",
})
_MODULE_FLAGS = ("-m", "--module")
_UNSUPPORTED = {"--no-python": N_("the workers are not Python"), "--no_python": N_("the workers are not Python"),
                "--run-path": N_("the workers are not started as processes"),
                "--run_path": N_("the workers are not started as processes")}


@dataclass
class Worker:
    """One rank's process, as found from its port file or /proc."""

    pid: int
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    port: int | None = None
    error: str | None = None


def rewrite_torchrun(cmd: list[str], launcher: str = rank_launcher.__file__, tool: str = "--all-ranks --launch") -> list[str]:
    """`torchrun OPTS SCRIPT ARGS` (or `python -m torch.distributed.run ...`) with the launcher
    in SCRIPT's place: `torchrun OPTS' launcher [-m] SCRIPT ARGS`. `tool` names the command
    in the errors."""
    if not cmd:
        raise UsageError(tr("{tool}: give the torchrun command after `--` (e.g. -- torchrun "
                            "--nproc-per-node 2 train.py)").format(tool=tool))
    if os.path.basename(cmd[0]) == "torchrun":
        head, rest = cmd[:1], cmd[1:]
    elif len(cmd) >= 3 and cmd[1] == "-m" and cmd[2] == "torch.distributed.run":
        head, rest = cmd[:3], cmd[3:]
    else:
        raise UsageError(tr("{tool} runs torchrun (or python -m torch.distributed.run), not "
                            "{command}").format(tool=tool, command=repr(cmd[0])))
    opts: list[str] = []
    module = False
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        name = a.split("=", 1)[0]
        if name in _UNSUPPORTED:
            raise UsageError(tr("{tool}: torchrun {option} is not supported ({why})").format(
                tool=tool, option=name, why=tr(_UNSUPPORTED[name])))
        if name in _MODULE_FLAGS:
            module = True  # moved behind the launcher: torchrun must run the launcher as a file
            i += 1
            continue
        opts.append(a)
        if "=" not in a and a not in TORCHRUN_FLAGS:  # (abbreviated flags are not known)
            if i + 1 >= len(rest):
                raise UsageError(tr("torchrun option {option} needs a value").format(option=a))
            opts.append(rest[i + 1])
            i += 1
        i += 1
    if i >= len(rest):
        raise UsageError(tr("{tool}: the torchrun command has no training script").format(tool=tool))
    script, args = rest[i], rest[i + 1:]
    if not module and not os.path.isfile(script):
        raise UsageError(tr("{tool}: no such training script {path}").format(tool=tool, path=script))
    return [*head, *opts, launcher, *(["-m"] if module else []), script, *args]


def read_port_files(directory: Path) -> dict[int, Worker]:
    """The workers that have written their port (or their error) so far, by rank."""
    out: dict[int, Worker] = {}
    for path in directory.glob("rank-*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            d = json.loads(path.read_text())
            out[int(d["rank"])] = Worker(int(d["pid"]), int(d["rank"]), int(d["local_rank"]),
                                         int(d["world_size"]), int(d["local_world_size"]),
                                         d.get("port"), d.get("error"))
    return out


# ---------------------------------------------------------------- attach: /proc


def environ(pid: int) -> dict[str, str] | None:
    """The environment the process was started with (None when unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and parent(int(entry)) == pid:
            out.append(int(entry))
    return sorted(out)


def _worker(pid: int, env: dict[str, str]) -> Worker:
    rank = int(env.get("RANK", env.get("LOCAL_RANK", "0")))
    return Worker(pid, rank, int(env.get("LOCAL_RANK", "0")), int(env.get("WORLD_SIZE", "1")),
                  int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", "1"))))


def find_workers(pid: int) -> tuple[int | None, list[Worker]]:
    """(agent PID, workers) for PID = the torchrun agent or any of its workers."""
    if not os.path.exists(f"/proc/{pid}"):
        raise InspectError(tr("no process with PID {pid}").format(pid=pid))
    env = environ(pid)
    if env is None:
        raise InspectError(tr("cannot read the environment of PID {pid} (another user's process?)").format(pid=pid))
    agent = pid
    if "LOCAL_RANK" in env:
        agent = parent(pid) or pid
        # A forked child of a worker (a DataLoader worker) inherits LOCAL_RANK: go up to the worker.
        while (penv := environ(agent)) is not None and "LOCAL_RANK" in penv and (up := parent(agent)):
            agent = up
    found: list[Worker] = []
    level = [agent]
    for _depth in range(3):  # the agent, or a shell or wrapper a few levels above it
        nxt: list[int] = []
        for p in level:
            for c in children(p):
                cenv = environ(c)
                if cenv is not None and "LOCAL_RANK" in cenv:
                    found.append(_worker(c, cenv))
                else:
                    nxt.append(c)
        if found:
            break
        level = nxt
    if not found:
        raise InspectError(tr("PID {pid} is not a torchrun worker or agent: no child process has LOCAL_RANK "
                              "in its environment").format(pid=pid))
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id is not None:  # the PID given was a worker: keep its own job's ranks
        found = [w for w in found if (environ(w.pid) or {}).get("TORCHELASTIC_RUN_ID") == run_id]
    return agent, sorted(found, key=lambda w: w.rank)
