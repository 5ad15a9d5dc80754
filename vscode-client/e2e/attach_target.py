"""The already-running process that step 5 of the end-to-end scenario attaches to.

run.sh copies this file into the e2e workspace; scenario.mjs runs it with the venv's Python. It
listens with debugpy on a loopback port the OS picks (printed as `LISTENING <host> <port>`),
waits (bounded) for a client, stops at `debugpy.breakpoint()` with a few tensors in `main`'s
frame (a small grid and its views, a row of a big storage), then prints `RESUMED` and keeps
running (bounded) so the scenario can check that detaching left it alive. Every wait has a deadline: it never outlives a broken run for long.
"""

import os
import sys
import time

import debugpy
import torch

DEADLINE_S = float(os.environ.get("E2E_TARGET_DEADLINE_S", "300"))


def main() -> int:
    end = time.monotonic() + DEADLINE_S
    host, port = debugpy.listen(("127.0.0.1", 0))
    print(f"LISTENING {host} {port}", flush=True)
    grid = torch.randn(3, 4)
    grid_t = grid.t()
    window = grid[1:, 1:3]
    big = torch.zeros(1000, 12800)  # 48.8 MiB
    row = big[400]  # noqa: F841 -- 50 KiB of it: the memory panel draws it as a mark on a bar to scale
    while not debugpy.is_client_connected():
        if time.monotonic() > end:
            print("NO CLIENT before the deadline", flush=True)
            return 3
        time.sleep(0.1)
    debugpy.wait_for_client()  # returns once the client has sent configurationDone
    debugpy.breakpoint()
    print(f"RESUMED {tuple(grid_t.stride())} {window.storage_offset()}", flush=True)
    while time.monotonic() < end:
        time.sleep(0.2)
    print("DEADLINE reached", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
