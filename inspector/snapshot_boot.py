"""The code a snapshot runs inside the target, as text: a one-statement entry and a boot file.

The entry is what gdb hands to `PyRun_SimpleString` (or `sys.remote_exec` runs): one `try`
statement that binds no name in `__main__`, reads the boot file from the private directory and
does nothing at all when that file is gone (the CLI removes it when it gives up waiting, so a
call that runs late leaves no trace). The boot file execs the probe's own source (its parts, the same
module `--memory` injects through debugpy) into a throw-away dict, writes the report JSON to a
0600 file in the private directory, and undoes what it did: the dicts are cleared (their
function/global cycles would otherwise wait for the next gc), modules that only its imports
added are dropped from `sys.modules` (standard-library modules that appeared during the
snapshot: the probe imports nothing else). It starts no thread and sets no tracer.
"""

from __future__ import annotations

import importlib.util
import marshal

from stridelens.inspector import probe as probe_module
from stridelens.inspector import probe_parts

BOOT_NAME = "boot.py"


def N_(message: str) -> str:
    """Marks an English template for the catalogue (see probe.N_): these are the boot file's own
    messages, written in the target and shown in the user's language by the CLI."""
    return message


TARGET_MESSAGES = (  # what _BOOT below raises, word for word
    N_("the main thread is importing modules (is torch still loading?); try again in a moment"),
    N_("snapshot failed: {error}"),
)
REPORT_NAME = "report.json"
def entry_statement(boot_path: str) -> str:
    """The single statement run in the target's main thread (short: it travels through gdb)."""
    # The file is closed by hand: a file left to the collector warns (ResourceWarning), and any
    # warning, even an ignored one, adds `__warningregistry__` to `__main__`.
    return (f"try:\n exec(compile((lambda f:(f.read(),f.close())[0])(open({boot_path!r},'rb')),{boot_path!r},'exec'),"
            f"{{'__name__':{probe_module.PRIVATE_NAME!r},'__builtins__':__builtins__}})\n"
            "except Exception:\n pass\n")


def boot_source(out_dir: str, top: int, min_pin_bytes: int, queued_at: float, named: bool = False) -> str:
    parts = probe_parts.sources()
    code = marshal.dumps(tuple(compile(src, filename, "exec") for src, filename in parts))
    return _BOOT.format(name=probe_module.PRIVATE_NAME, parts=parts, code=code,
                        magic=importlib.util.MAGIC_NUMBER, top=top, min_pin=min_pin_bytes,
                        queued=queued_at, named=named, out_dir=out_dir, report=REPORT_NAME)


_BOOT = '''
def _stridelens_snapshot():
    import sys
    before = set(sys.modules)
    import json, os, time
    started = time.time()
    t0, c0 = time.perf_counter(), time.thread_time()
    ns = {{"__name__": {name!r}, "__builtins__": __builtins__}}
    target = {{}}
    # In the middle of an import (torch still loading, say) the heap is half built: come back later.
    f = sys._getframe(1)
    importing = False
    while f is not None and not importing:
        importing = f.f_code.co_filename.startswith("<frozen importlib")
        f = f.f_back
    del f
    try:
        if importing:
            raise RuntimeError("the main thread is importing modules (is torch still loading?); try again in a moment")
        # The probe compiled here when the target's bytecode is ours (same magic number): a
        # compile in the target costs ~30 ms of its main thread.
        fx = sys.modules.get("_frozen_importlib_external")
        if getattr(fx, "MAGIC_NUMBER", None) == {magic!r}:
            codes = __import__("marshal").loads({code!r})
        else:
            codes = [compile(src, filename, "exec") for src, filename in {parts!r}]
        del fx
        for code in codes:  # the probe's parts, in order, in one namespace
            exec(code, ns)
        del code, codes
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        target = {{"pid": os.getpid(), "python": sys.version.split()[0],
                   "torch": getattr(torch, "__version__", None),
                   "cuda_available": bool(cuda.is_available()) if cuda is not None else False,
                   "cuda_initialized": bool(cuda.is_initialized()) if cuda is not None else False}}
        del torch, cuda
        # Frame locals stay unread on Python <= 3.12: reading them caches a dict on the frame
        # that would keep the frame's tensors alive after the snapshot.
        body = ns["process_report_json"]({top!r}, {min_pin!r}, None,
                                         frame_locals=sys.version_info >= (3, 13), named={named!r})
    except Exception as e:  # never raise into the user's program
        msg = str(e) if importing else f"snapshot failed: {{type(e).__name__}}: {{e}}"
        body = json.dumps({{"ok": False, "error": msg}})
    finally:
        ns.clear()
    timing = {{"queued_at": {queued!r}, "started_at": started, "report_s": time.perf_counter() - t0,
              "report_cpu_s": time.thread_time() - c0}}
    out = '{{"timing": ' + json.dumps(timing) + ', "target": ' + json.dumps(target) + ', "body": ' + body + '}}'
    # Standard-library modules only: a module another thread imported meanwhile stays.
    stdlib = getattr(sys, "stdlib_module_names", ())
    for name in set(sys.modules) - before:
        if name.partition(".")[0] in stdlib:
            del sys.modules[name]
    path = os.path.join({out_dir!r}, {report!r})
    fd = os.open(path + ".part", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, out.encode())
    finally:
        os.close(fd)
    os.rename(path + ".part", path)


try:
    _stridelens_snapshot()
finally:
    globals().clear()
'''
