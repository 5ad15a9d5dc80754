"""Process lifecycle: quiet logging, exiting promptly and silently, following the client.

pygls 2.1.1's own `exit` handling closes stdout and raises SystemExit inside the message
loop; `asyncio.run` then cancels pending tasks and `JsonRPCServer.shutdown` joins the
thread pool whose reader thread is still blocked in `stdin.readline()`. Until the client
closes the pipe, anything still queued (diagnostics of a run that just finished, log
records) is written to the closed stdout and pygls logs "Error sending data ... I/O
operation on closed file" with a traceback through logging's last-resort stderr handler,
for seconds. Here `exit` ends the process at once with `os._exit` after flushing stdout,
and pygls' loggers never reach stderr unless a log file is asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time


def configure_logging(log_file: str | None, messages: bool = False) -> None:
    """Our log lines (one per analysis, torch's import, problems) go to `log_file` at INFO.
    pygls writes every message body it sends at INFO (a whole diagnostics payload per publish,
    ~90 KB for a 3,000-line file), so its loggers stay at WARNING unless `messages` asks for
    the LSP traffic, which they then log in full (DEBUG)."""
    pygls_logger = logging.getLogger("pygls")
    ours = logging.getLogger("stridelens")
    handler: logging.Handler
    if log_file:
        handler = logging.FileHandler(log_file, encoding="utf-8")  # one file handle for both loggers
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        levels = (logging.DEBUG if messages else logging.WARNING, logging.INFO)
    else:
        handler = logging.NullHandler()
        levels = (logging.WARNING, logging.WARNING)
    for logger, level in zip((pygls_logger, ours), levels, strict=True):
        logger.propagate = False
        logger.handlers.clear()
        logger.setLevel(level)
        logger.addHandler(handler)


def hard_exit(code: int) -> None:
    """Flush what was written and end the process now, without interpreter teardown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.buffer.flush()
    os._exit(code)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def watch_parent(pid: int | None, interval_s: float = 0.5) -> threading.Thread | None:
    """Exit when the client process (initialize's `processId`) dies."""
    if not pid or pid == os.getpid() or not pid_alive(pid):
        return None

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if not pid_alive(pid):
                hard_exit(0)

    thread = threading.Thread(target=watch, name="stridelens-parent-watch", daemon=True)
    thread.start()
    return thread
