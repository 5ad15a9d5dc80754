"""`stridelens inspect` end to end: real debugpy subprocesses on loopback, real torch on CPU.

Facts in reports are checked against the same tensors rebuilt here (the oracle).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from stridelens.inspector import session as session_module
from stridelens.server.cli import main as stridelens_main

from .conftest import EXAMPLES, free_port, marker_line

pytestmark = pytest.mark.timeout(180)

TENSORS = """
    import torch
    a = torch.arange(24.0).reshape(4, 6)
    v = a.t()[1:]
    w = torch.randn(8, requires_grad=True)
    xs = [torch.full((1000,), float(i)) for i in range(3)]
    losses = [(w.repeat(125) * x).sum() for x in xs]
    big = torch.zeros(1 << 19)
    head = big[:4]
    del big
    meta = torch.empty(3, 4, device="meta")
    sp = torch.eye(3).to_sparse()
    print("ready")  # inspect here
"""


def nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def test_launch_break_expr_frame_memory(script: Any, inspect_cli: Any) -> None:
    p = script("tensors.py", TENSORS)
    r = inspect_cli(
        "--launch", str(p), "--break", f"{p}:{marker_line(p)}",
        "--expr", "v", "--expr", "meta", "--expr", "sp", "--expr", "nope", "--expr", "len(xs)",
        "--expr", "torch.zeros(len([k for k in globals() if 'stridelens' in k or k == '_']))",
        "--frame", "--memory", "--min-pin-bytes", "1000000", "--format", "json",
    )
    assert r.rc == 1, r.err  # two expressions failed: the job reports it
    rep = r.json()
    assert rep["stop"]["line"] == marker_line(p) and rep["stop"]["reason"] == "breakpoint"
    assert rep["target"]["torch"] == torch.__version__ and rep["target"]["tcp_nodelay"] is True

    # The oracle: the same tensors, built here.
    a = torch.arange(24.0).reshape(4, 6)
    v = a.t()[1:]
    xs = [torch.full((1000,), float(i)) for i in range(3)]
    big = torch.zeros(1 << 19)
    head = big[:4]

    ex = {e["expr"]: e for e in rep["expressions"]}
    dv = ex["v"]["result"]
    assert dv["shape"] == list(v.shape) and dv["strides"] == list(v.stride())
    assert dv["storage_offset"] == v.storage_offset() and dv["contiguous"] == v.is_contiguous()
    assert dv["storage_bytes"] == nbytes(a) and dv["is_view"] is True
    assert ex["meta"]["result"]["storage_bytes"] == nbytes(torch.empty(3, 4, device="meta"))
    assert ex["sp"]["result"]["storage_key"] is None and ex["sp"]["result"]["layout"] == "sparse_coo"
    assert "NameError" in ex["nope"]["error"]
    assert ex["len(xs)"]["error"] == "not a tensor: the expression is a builtins.int"
    # The probe left no names in the user's globals.
    assert next(e for e in rep["expressions"] if e["expr"].startswith("torch.zeros"))["result"]["shape"] == [0]

    group = next(g for g in rep["frame"]["groups"] if {m["name"] for m in g["tensors"]} == {"a", "v"})
    assert group["storage_bytes"] == nbytes(a)
    assert f"a, v share one {nbytes(a)}-byte storage" in group["summary"]
    # `_base` is the root of a view chain, the unnamed arange result (`v._base is a` is False):
    # `a` covers it whole, so `v` shares the storage of `a`, and is no view of it.
    assert v._base is not a
    assert (f"v is a view of an unnamed base at offset {v.storage_offset()} (it shares the storage of a, "
            "not a view of it)") in group["summary"]
    assert "a is a view of an unnamed base at offset 0" in group["summary"]
    assert dv["base"]["name"] is None and dv["base"]["shares_with"] == "a"
    assert any(x["name"] == "sp" for x in rep["frame"]["no_storage"])

    findings = {f["kind"]: f for f in rep["memory"]["findings"]}
    leak = findings["graph_kept_alive"]
    assert leak["container"] == "losses" and leak["graph_tensors"] == 3
    assert leak["bytes"] == sum(nbytes(x) for x in xs)
    pin = findings["view_pins_storage"]
    assert pin["tensor"] == "head" and pin["bytes"] == nbytes(big)
    assert pin["used_bytes"] == head.numel() * head.element_size()
    assert rep["memory"]["no_storage_count"] >= 1


def test_examples_name_the_problem(inspect_cli: Any) -> None:
    def run(name: str, *what: str) -> dict[str, Any]:
        p = EXAMPLES / name
        r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", *what, "--format", "json")
        assert r.rc == 0, r.err
        return dict(r.json())

    rep = run("leaky_losses.py", "--memory")
    leak = next(f for f in rep["memory"]["findings"] if f["kind"] == "graph_kept_alive")
    assert leak["container"] == "losses" and leak["graph_tensors"] == 20
    # Every step's graph saved at least its ReLU output (128 x 512 floats).
    relu_out = torch.empty(128, 512)
    assert leak["bytes"] >= 20 * nbytes(relu_out)

    rep = run("view_pins_storage.py", "--memory")
    table = torch.empty(50_000, 256)
    first_rows = table[:8]
    pin = next(f for f in rep["memory"]["findings"] if f["kind"] == "view_pins_storage")
    assert pin["tensor"] == "first_rows" and pin["bytes"] == nbytes(table)
    assert pin["used_bytes"] == first_rows.numel() * first_rows.element_size()

    rep = run("video_permute.py", "--expr", "x", "--frame")
    x = torch.empty(4, 8, 3, 32, 32).permute(0, 2, 1, 3, 4)
    dx = rep["expressions"][0]["result"]
    assert dx["strides"] == list(x.stride()) and dx["contiguous"] is False
    assert any(n.startswith("not contiguous") for n in dx["notes"])
    g = next(g for g in rep["frame"]["groups"] if "x" in {m["name"] for m in g["tensors"]})
    assert g["summary"].startswith("clips, x share one") and "x is a view of clips" in g["summary"]

    rep = run("detach_mutate.py", "--expr", "h", "--frame")
    dh = rep["expressions"][0]["result"]
    assert dh["version"] == 1 and any("modified in place" in n for n in dh["notes"])
    g = next(g for g in rep["frame"]["groups"] if "h" in {m["name"] for m in g["tensors"]})
    assert g["summary"].startswith("h, snapshot share one 64-byte storage")


CONNECT_TARGET = """
    import pathlib, time
    import debugpy, torch
    debugpy.listen(("127.0.0.1", {port}))
    t = torch.arange(10.0)
    keep = t[2:5]
    pathlib.Path("ready").write_text("1")
    while True:
        time.sleep(0.01)
"""


def test_connect_to_debugpy_listen(target: Any, inspect_cli: Any, tmp_path: Path) -> None:
    port = free_port()
    proc = target(CONNECT_TARGET.format(port=port), ready_file=tmp_path / "ready")
    r = inspect_cli("--connect", f"127.0.0.1:{port}", "--expr", "keep", "--format", "json")
    assert r.rc == 0, r.err
    d = r.json()["expressions"][0]["result"]
    keep = torch.arange(10.0)[2:5]
    assert d["storage_offset"] == keep.storage_offset() and d["storage_bytes"] == nbytes(keep)
    time.sleep(0.5)
    assert proc.poll() is None, "--continue (the default) must leave the target running"
    # A second session on the same target (the probe module persists there).
    r = inspect_cli("--connect", f"localhost:{port}", "--frame", "--format", "json")
    assert r.rc == 0, r.err
    assert any("keep" in g["summary"] for g in r.json()["frame"]["groups"])
    r = inspect_cli("--connect", f"127.0.0.1:{port}", "--memory", "--kill")
    assert r.rc == 0, r.err
    assert "Live tensors per device" in r.out
    proc.wait(timeout=20)


PID_TARGET = """
    import pathlib, time
    import torch
    t = torch.arange(10.0)
    keep = t[2:5]
    pathlib.Path("ready").write_text("1")
    while True:
        time.sleep(0.01)
"""


def test_pid_attach(target: Any, inspect_cli: Any, tmp_path: Path) -> None:
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed: PID attach needs it (apt-get install gdb)")
    proc = target(PID_TARGET, ready_file=tmp_path / "ready")
    r = inspect_cli("--pid", str(proc.pid), "--expr", "keep", "--format", "json", timeout=150)
    if r.rc != 0 and ("ptrace" in r.err.lower() or "not permitted" in r.err.lower()):
        pytest.skip(f"ptrace is not permitted here: {r.err.strip()[-200:]}")
    assert r.rc == 0, r.err
    d = r.json()["expressions"][0]["result"]
    assert d["storage_offset"] == 2 and d["storage_bytes"] == nbytes(torch.arange(10.0))
    assert proc.poll() is None
    # A second inspect reuses the injected debugpy (a second injection would fail inside it).
    r = inspect_cli("--pid", str(proc.pid), "--memory", "--format", "json", timeout=60)
    assert r.rc == 0, r.err
    assert r.json()["memory"]["tensor_count"] >= 2


def test_pid_target_that_exits_during_the_report(target: Any, inspect_cli: Any, tmp_path: Path) -> None:
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed: PID attach needs it (apt-get install gdb)")
    proc = target(PID_TARGET, ready_file=tmp_path / "ready")
    r = inspect_cli("--pid", str(proc.pid), "--expr", "__import__('os')._exit(3)", "--memory", timeout=150)
    if r.rc != 0 and ("ptrace" in r.err.lower() or "not permitted" in r.err.lower()):
        pytest.skip(f"ptrace is not permitted here: {r.err.strip()[-200:]}")
    assert r.rc == 1 and "the target exited during the inspection" in r.err, r.err
    assert "Traceback" not in r.err
    assert proc.wait(timeout=20) == 3


# ---------------------------------------------------------------- bad input


def test_unknown_pid(inspect_cli: Any) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # its PID is now free
    r = inspect_cli("--pid", str(dead.pid), "--memory")
    assert r.rc == 1
    assert f"no process with PID {dead.pid}" in r.err and "Traceback" not in r.err


def test_port_closed(inspect_cli: Any) -> None:
    r = inspect_cli("--connect", f"127.0.0.1:{free_port()}", "--memory")
    assert r.rc == 1 and "nothing accepts connections" in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("address", ["10.1.2.3:5678", "example.com:5678", "[2001:db8::1]:5678"])
def test_remote_address_refused_without_a_socket(address: str, monkeypatch: Any, capsys: Any) -> None:
    def no_socket(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "socket", no_socket)
    monkeypatch.setattr(socket, "create_connection", no_socket)
    monkeypatch.setattr(socket, "getaddrinfo", no_socket)
    rc = stridelens_main(["inspect", "--connect", address, "--memory"])
    assert rc == 2
    assert "--allow-remote" in capsys.readouterr().err
    with pytest.raises(session_module.UsageError):
        session_module.parse_address(address)


def test_loopback_addresses_accepted() -> None:
    assert session_module.parse_address("127.0.0.1:5678") == ("127.0.0.1", 5678)
    assert session_module.parse_address("localhost:1") == ("127.0.0.1", 1)
    assert session_module.parse_address("[::1]:9") == ("::1", 9)
    for bad in ("5678", "host:", "127.0.0.1:70000", "127.0.0.1:x"):
        with pytest.raises(session_module.UsageError):
            session_module.parse_address(bad)


def test_breakpoint_on_line_without_code(script: Any, inspect_cli: Any) -> None:
    p = script("blank.py", "import torch\n\n# a comment\nx = torch.ones(2)\n")
    for line in (2, 3, 50):
        r = inspect_cli("--launch", str(p), "--break", f"{p}:{line}", "--frame")
        assert r.rc == 2 and "has no code" in r.err, r.err
    r = inspect_cli("--launch", str(p), "--break", f"{p}:x")
    assert r.rc == 2 and "FILE:LINE" in r.err
    r = inspect_cli("--launch", str(p), "--frame")
    assert r.rc == 2 and "needs at least one --break" in r.err


def test_target_exits_before_breakpoint(script: Any, inspect_cli: Any) -> None:
    p = script("never.py", """
        def never_called():
            return 1  # inspect here

        print("bye")
    """)
    r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--frame", timeout=60)
    assert r.rc == 1 and "exited (exit code 0) before any breakpoint was hit" in r.err, r.err
    assert "Traceback" not in r.err


def test_breakpoint_in_a_file_the_target_never_runs(script: Any, inspect_cli: Any) -> None:
    main = script("main.py", "import torch\nx = torch.ones(3)\nprint(x)\n")
    other = script("other.py", "def helper():\n    return 1\n")
    r = inspect_cli("--launch", str(main), "--break", f"{other}:2", "--frame", timeout=60)
    assert r.rc == 1 and "exited (exit code 0) before any breakpoint was hit" in r.err, r.err
    assert "Traceback" not in r.err


OUT_OF_MEMORY = """
    import resource
    import torch
    big = torch.ones(1 << 22)
    with open("/proc/self/status") as status:
        size = next(int(line.split()[1]) for line in status if line.startswith("VmSize")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + (8 << 20), resource.RLIM_INFINITY))
    blocks = []
    try:
        while True:
            blocks.append(bytearray(1 << 20))
    except MemoryError:
        pass
    print(len(blocks))  # inspect here
"""


def test_target_out_of_memory_says_so(script: Any, inspect_cli: Any) -> None:
    """A target that has used up its address space: debugpy cannot even start the thread an
    evaluation needs, fails the request inside the target and never answers. The inspector
    says why at once (not "no answer within 60 s") and hides debugpy's own traceback."""
    p = script("oom.py", OUT_OF_MEMORY)
    start = time.monotonic()
    r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--memory", "--expr", "big", timeout=90)
    assert r.rc == 1, r.err
    assert "out of memory" in r.err and "break earlier" in r.err, r.err
    assert "Traceback" not in r.err and "Error processing internal command" not in r.err, r.err
    assert time.monotonic() - start < 45  # well before the request timeout


def test_target_without_torch(script: Any, inspect_cli: Any) -> None:
    p = script("plain.py", """
        import json
        data = [1, 2, 3]
        print(json.dumps(data))  # inspect here
    """)
    r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--memory")
    assert r.rc == 1 and "has not imported torch" in r.err, r.err


def test_target_dies_during_inspection(script: Any, inspect_cli: Any) -> None:
    p = script("dies.py", """
        import torch
        t = torch.ones(3)
        print("x")  # inspect here
    """)
    r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}",
                    "--expr", "__import__('os')._exit(3)", timeout=90)
    assert r.rc == 1 and "the target exited (exit code 3)" in r.err, r.err
    assert "Traceback" not in r.err


@pytest.mark.cuda
def test_cuda_totals_match_the_allocator(script: Any, inspect_cli: Any, tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    p = script("cuda_target.py", """
        import torch
        a = torch.ones(1 << 20, device="cuda")
        b = torch.ones(256, 256, device="cuda")[:, :3]
        alloc = torch.cuda.memory_allocated()
        print(alloc)  # inspect here
    """)
    r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--expr", "a",
                    "--memory", "--format", "json")
    assert r.rc == 0, r.err
    rep = r.json()
    a = torch.ones(1 << 20, device="cuda")
    b = torch.ones(256, 256, device="cuda")
    cuda = next(d for d in rep["memory"]["devices"] if d["device"].startswith("cuda"))
    assert cuda["bytes"] == nbytes(a) + nbytes(b)
    assert cuda["allocated"] >= cuda["bytes"]  # the allocator rounds blocks up
    da = rep["expressions"][0]["result"]
    assert da["cuda"]["allocated"] == cuda["allocated"] and da["storage_bytes"] == nbytes(a)


def test_a_breakpoint_on_import_torch_says_to_break_after_it(inspect_cli: Any, script: Any) -> None:
    """A breakpoint stops before its line runs: on `import torch`, torch is not imported yet.
    The error says so and names the next statement's line (a comment and a blank line between)."""
    p = script("imports.py", """\
        import os

        import torch

        # a comment
        x = torch.ones(3)
        print(x, os.sep)
    """)
    res = inspect_cli("--launch", str(p), "--break", f"{p}:3", "--memory", "--kill")
    err = " ".join(res.err.split())
    assert res.rc == 1
    assert ("the target process has not imported torch: line 3 imports it, and a breakpoint stops before its "
            "line runs; break after the import, at the next statement: --break ") in err, err
    assert err.endswith("imports.py:6"), err
    res = inspect_cli("--launch", str(p), "--break", f"{p}:1", "--kill")
    err = " ".join(res.err.split())
    assert res.rc == 1 and "has not imported torch yet: line 3 imports it; break after the import" in err, err
    assert err.endswith("imports.py:6"), err


MEMORY_NAMES = """\
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("encoder", torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                                    torch.nn.Linear(256, 256)))
    model.add_module("fc", torch.nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(20):
        out = model(torch.randn(256, 256))
        loss = out.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    h = model.encoder(torch.randn(256, 256))
    for i in range(8):
        h = torch.tanh(h)
    loss = h.sum()
    print("done")  # inspect here
"""


def test_memory_names_gradients_optimizer_state_and_groups_alike_rows(inspect_cli: Any, script: Any) -> None:
    """--memory names what --diff-steps names: a gradient by its parameter, Adam's state by its
    parameter; eight storages the tanh chain saved are one row, named by the graph's root; the
    frame's list of 20 losses is one row."""
    p = script("names.py", MEMORY_NAMES)
    res = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--memory", "--frame",
                      "--top", "20", "--kill")
    assert res.rc == 0, res.err
    rows = [" ".join(line.split()) for line in res.out.splitlines()]
    for name in ("model.encoder.0.weight.grad", "model.encoder.2.weight.grad",
                 "opt.state[model.encoder.0.weight]['exp_avg']", "opt.state[model.encoder.2.weight]['exp_avg_sq']",
                 "opt.state[model.fc.weight]['exp_avg']"):
        assert f"256.0 KiB cpu 256.0 KiB `{name}`" in rows or any(r.endswith(f"`{name}`") for r in rows), name
    assert "opt.state['exp_avg']" not in res.out and "unnamed" not in res.out, res.out
    # 9 of the chain's outputs have no tensor object (h has one): one row, by the outermost root.
    line = marker_line(p, "loss = h.sum()")  # where the graph's root was bound
    assert f"9 × 256.0 KiB cpu 256.0 KiB saved by `loss`'s graph, from line {line}" in rows, res.out
    assert f"256.0 KiB cpu 256.0 KiB `h`; saved by `loss`'s graph, from line {line}" in rows
    # graph-saved counts every storage a graph saved and says what it is; no empty allocator column.
    dev = next(r for r in rows if r.startswith("device "))
    assert dev == "device tensors storages bytes graph-saved"
    assert any(r.startswith("graph-saved: storages that live autograd graphs keep for backward (") for r in rows)
    assert "No allocator column: CUDA is not initialised in the target" in " ".join(rows)
    # The frame: losses[0..19] on one row.
    assert "20 × 4 B cpu losses[0..19] () float32 () 0 yes" in rows, res.out
    assert "losses[3]" not in res.out


def test_internal_error_watch_reads_each_error_of_a_chained_traceback() -> None:
    """pydevd's traceback of a failed request, chained: each exception line of it is handed
    on, and every line of it is held back from the target's output; the target's own lines
    are not."""
    seen: list[str] = []
    watch = session_module.InternalErrorWatch(seen.append)
    lines = [
        "epoch 1\n",
        "3.52s - Error processing internal command.\n",
        "Traceback (most recent call last):\n",
        '  File "pydevd.py", line 2319, in _do_wait_suspend\n',
        "MemoryError\n",
        "\n",
        "During handling of the above exception, another exception occurred:\n",
        "\n",
        "Traceback (most recent call last):\n",
        '  File "threading.py", line 964, in start\n',
        "RuntimeError: can't start new thread\n",
        "epoch 2\n",
    ]
    held = [watch(line) for line in lines]
    assert held == [False] + [True] * 10 + [False]
    assert seen == ["MemoryError", "RuntimeError: can't start new thread"]
