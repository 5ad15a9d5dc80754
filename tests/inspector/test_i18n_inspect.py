"""`stridelens inspect` in Chinese: real debugpy subprocesses on loopback, real torch on CPU.

The text reports, the leak findings the probe writes in the target, and the inspector's errors
follow `--lang zh-CN` / `LANG=zh_CN.UTF-8`; `--format json` is the same English in every language.
"""

from __future__ import annotations

import ast
import json
import os
import re
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stridelens import i18n
from stridelens.inspector import target_text

from .conftest import REPO, free_port, marker_line, run_inspect
from .test_snapshot import TRAIN, cli, skip_without_ptrace, start  # noqa: F401 -- the snapshot fixtures

pytestmark = pytest.mark.timeout(300)

SCRIPT = """
    import torch
    torch.manual_seed(0)
    a = torch.arange(24.0).reshape(4, 6)
    v = a.t()[1:]
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    xs = [torch.randn(16, 8) for _ in range(3)]
    losses = [model(x).pow(2).mean() for x in xs]
    losses[0].backward(retain_graph=True)
    big = torch.zeros(1 << 19)
    head = big[:4]
    del big
    print("ready")  # inspect here
"""
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


@pytest.fixture
def run(tmp_path: Path) -> Any:
    def go(*args: str, lang: str = "C.UTF-8", timeout: float = 150) -> Any:
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "200",
               "LANG": lang, "LC_ALL": "", "LC_MESSAGES": ""}
        return run_inspect(args, env, timeout)

    return go


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _stable(report: dict[str, Any]) -> str:
    """The report without what differs between two runs of the same script (process, addresses)."""
    report = {k: v for k, v in report.items() if k != "target"}
    report["cuda_summary"].update(process=None, cpu_tensor_share_of_rss=None)  # each run's resident memory
    text = json.dumps(report, indent=2)
    return re.sub(r"0x[0-9a-f]+", "0x?", text)


def test_reports_in_chinese_and_json_the_same_in_every_language(script: Any, run: Any) -> None:
    p = script("train.py", SCRIPT)
    args = ("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--expr", "v", "--expr", "len(xs)",
            "--frame", "--memory", "--min-pin-bytes", "1000000", "--grads", "--graph", "losses[1]",
            "--cuda-summary", "--kill")
    english = run(*args, "--format", "json")
    by_flag = run(*args, "--format", "json", "--lang", "zh-CN")
    assert english.rc == by_flag.rc == 1, english.err  # `len(xs)` is not a tensor
    assert _stable(english.json()) == _stable(by_flag.json())
    assert not [s for s in _strings(by_flag.json()) if CJK.search(s)]
    ex = {e["expr"]: e for e in english.json()["expressions"]}
    assert ex["len(xs)"]["error"] == "not a tensor: the expression is a builtins.int"
    findings = {f["kind"]: f["message"] for f in english.json()["memory"]["findings"]}
    assert findings["graph_kept_alive"].startswith("losses (list of 3) keeps 3 autograd graphs alive")

    text = run(*args, lang="zh_CN.UTF-8")
    assert text.rc == 1, text.err
    out = text.out
    assert "已停下（breakpoint）" in out and "（函数 <module>）" in out
    # The expression's card, and the probe's error for `len(xs)` in Chinese.
    assert "存储偏移" in out and "步长" in out and "（即 `_base`）" in out
    assert "len(xs): 不是张量：表达式的值是 builtins.int" in out
    # The frame's storage groups (rebuilt from the probe's facts) and the process report.
    assert "当前帧中的张量，按存储分组" in out
    flat = re.sub(r"\s+", "", out)  # lines wrap where the terminal ends
    assert f"a,v共享一个{24 * 4}字节的存储" in flat
    assert "v是一个未命名基张量在偏移1处的视图（它与a共享存储，但不是a的视图）" in flat  # `v._base is a` is False
    assert "各设备上的存活张量" in out and "最大的存储（前 10 个）" in out
    # Leak findings, which the probe wrote in English inside the target.
    assert "losses（长度为 3 的 list）让 3 个计算图保持存活" in out
    assert "head 只用到它所保持存活的 2.0 MiB 存储中的 16 B" in out
    # --grads, --graph and --cuda-summary.
    assert "梯度健康状况" in out and "梯度范数" in out
    assert "计算图：losses[1]" in out and "个保存的张量" in out
    assert "内存解读" in out and "没有 CUDA 数据" in out and "存活的 CPU 张量占" in out
    # English words left are code, names and units, not sentences.
    for english_sentence in ("keeps 3 autograd graphs", "share one", "Live tensors per device",
                             "Gradient health", "Memory explained", "not a tensor"):
        assert english_sentence not in out, english_sentence


def test_errors_in_chinese(script: Any, run: Any) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # its PID is now free
    r = run("--pid", str(dead.pid), "--memory", "--lang", "zh-CN")
    assert r.rc == 1 and f"没有 PID 为 {dead.pid} 的进程" in r.err and "Traceback" not in r.err
    assert r.err.startswith("stridelens inspect：")
    r = run("--connect", f"127.0.0.1:{free_port()}", "--memory", lang="zh_CN.UTF-8")
    assert r.rc == 1 and "上没有程序接受连接" in "".join(r.err.split())
    r = run("--connect", "10.1.2.3:5678", "--memory", "--lang", "zh-CN")
    assert r.rc == 2 and "不是回环地址" in "".join(r.err.split()) and "--allow-remote" in r.err
    blank = script("blank.py", "import json\n\n# a comment\nprint(json.dumps([1]))  # inspect here\n")
    r = run("--launch", str(blank), "--break", f"{blank}:3", "--lang", "zh-CN")
    assert r.rc == 2 and "的第3行没有代码" in "".join(r.err.split())
    # The probe's own error, written in English inside a target without torch.
    r = run("--launch", str(blank), "--break", f"{blank}:{marker_line(blank)}", "--memory", "--lang", "zh-CN")
    assert r.rc == 1 and "目标进程没有导入torch" in "".join(r.err.split()), r.err
    # The debuggee dies while it is being inspected.
    dies = script("dies.py", "import torch\nt = torch.ones(3)\nprint('x')  # inspect here\n")
    r = run("--launch", str(dies), "--break", f"{dies}:{marker_line(dies)}",
            "--expr", "__import__('os')._exit(3)", "--lang", "zh-CN")
    assert r.rc == 1 and "目标进程在检查过程中就退出了（退出码3）" in "".join(r.err.split()), r.err


def test_inspect_help_in_chinese(run: Any) -> None:
    r = run("--help", "--lang", "zh-CN")
    assert r.rc == 0
    assert r.out.startswith("用法：stridelens inspect [-h]")
    assert "显示本帮助信息并退出" in r.out and "向运行中的进程注入 debugpy（需要 gdb）" in r.out
    assert "示例：\n  stridelens inspect --launch train.py" in r.out and "--diff-steps N" in r.out


# ---------------------------------------------------------------- the probes' texts, in process


def test_probe_modules_do_not_import_stridelens_i18n() -> None:
    here = Path(target_text.__file__).parent
    for name in target_text.PROBE_MODULES:
        tree = ast.parse((here / f"{name}.py").read_text(encoding="utf-8"))
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        if name == "snapshot_boot":  # builds the boot file on the stridelens side, from the probe's source
            assert not [m for m in imported if m.startswith("stridelens") and m != "stridelens.inspector"], imported
        elif name in ("probe_describe", "probe_report"):  # in-process only, the probe's names (test_probe.py)
            assert not [m for m in imported if m.startswith("stridelens") and m != "stridelens.inspector.probe"], imported
        else:
            assert not [m for m in imported if m.startswith("stridelens")], (name, imported)


def test_every_probe_template_reads_back_in_chinese() -> None:
    templates = target_text.probe_msgids()
    assert len(templates) > 30 and "an unnamed tensor" in templates
    try:
        i18n.set_language("zh-CN")
        for msgid in templates:
            fields = [f for _, f, _, _ in string.Formatter().parse(msgid) if f]
            values = {f: f"V{i}" for i, f in enumerate(dict.fromkeys(fields))}
            english = msgid.format(**values)
            assert target_text.from_target(english) == i18n.tr(msgid).format(**values), msgid
            assert CJK.search(target_text.from_target(english)) or msgid == "{owner}.grad", msgid
        # Values that are themselves probe texts are translated too; other text comes back as it was.
        nested = "an unnamed tensor uses 16 B of a 2.0 MiB storage it keeps alive (0.00076% used); .clone() it to free 2.0 MiB"
        assert target_text.from_target(nested).startswith("一个未命名的张量 只用到")
        assert target_text.from_target("RuntimeError: CUDA out of memory") == "RuntimeError: CUDA out of memory"
    finally:
        i18n.set_language("en")
    assert target_text.from_target(nested) == nested


# ---------------------------------------------------------------- the other reports, in Chinese


def test_step_diff_and_explain_errors_in_chinese(run: Any) -> None:
    steps = REPO / "tests" / "fixtures" / "steps" / "grow_vs_cache.py"
    r = run("--launch", str(steps), "--break", f"{steps}:{marker_line(steps)}:step >= 2", "--diff-steps", "2",
            "--kill", "--lang", "zh-CN")
    assert r.rc == 0, r.err
    assert "逐步对比，共 2 步（断点多命中 2 次）：存活存储" in r.out
    assert "是谁持有它们（每次停下时的字节数）" in r.out and "线性" in r.out
    assert "history：泄漏：每步多出 8.0 KiB" in r.out
    assert re.search(r"history +容器 +2 \(16\.0 KiB\)", r.out) and re.search(r"model\.\d\.(weight|bias)\.grad +梯度", r.out)  # which flat rows fit: ties
    assert "cache：自第一次停下以来有 1 个存储被替换" in r.out or "cache：" not in r.out
    script = REPO / "tests" / "fixtures" / "explain_errors" / "index_assign.py"
    r = run("--launch", str(script), "--explain-errors", lang="zh_CN.UTF-8")
    assert r.rc == 0, r.err
    rel = script.relative_to(REPO)
    assert "原地修改了 autograd 为反向传播保存的张量" in r.out
    assert f"，位于 {rel}:{marker_line(script, '# saves:')}（函数 step）" in r.out
    assert "期望 0，实际 1" in r.out and "绑定到：h（函数 <module>）" in r.out
    assert "torch 的报错" in r.out and "one of the variables needed for gradient computation" in r.out


def test_periodic_snapshots_in_chinese(start: Any, cli: Any) -> None:  # noqa: F811 -- the imported fixtures
    proc = start(TRAIN)
    r = cli("--pid", str(proc.pid), "--snapshot", "--every", "1", "--count", "2", "--lang", "zh-CN")
    skip_without_ptrace(r)
    assert r.rc == 0, r.err
    assert r.out.startswith(f"快照 pid {proc.pid}（python ") and "，方式：gdb — 主线程停顿" in r.out
    assert "（存储列表只列出前 10 个；总量和问题统计包含所有张量）" in r.out
    assert "2 次快照，每次都与第一次比较" in r.out and "（第一次）" in r.out
    assert "从第一次到最后一次快照的增长，按所有者分列" in r.out
    assert re.search(r"存活张量 [\d.]+ [KM]iB → [\d.]+ [KM]iB（\+[\d.]+ [KM]iB）；增长的有：history \+", r.out), r.out
    r = cli("--pid", str(proc.pid), "--snapshot", "--lang", "zh-CN", env={"PATH": "/nonexistent-bin"})
    assert r.rc == 1 and "--snapshot 需要 PATH 中有 gdb" in r.err, r.err


def test_rank_report_in_chinese() -> None:
    import io

    from rich.console import Console

    from stridelens.inspector import rank_findings, rank_reports

    from .test_all_ranks import _rank

    try:
        i18n.set_language("zh-CN")
        ranks = [_rank(0, 0, {"cuda:0": 4 << 20}, {"cuda:0": "w"}), _rank(1, 0, {"cuda:0": 4 << 20}, {"cuda:0": "w"})]
        merged = rank_findings.merge(ranks, top_len=64, how=i18n.tr("with --pause one pause every --interval seconds"))
        (f,) = [f for f in merged["findings"] if f["kind"] == "missing_set_device"]
        assert f["message"].startswith("rank 1（LOCAL_RANK 1）在 cuda:0，即 rank 0 的设备上持有 4.0 MiB：w，")
        assert merged["notes"][0].startswith("没有测量内存增长：每个 rank 至少需要两次采样，而本次只采了 1 次")
        per = [{"rank": r["rank"], "local_rank": r["local_rank"], "pid": 100 + r["rank"], "status": "ok", "error": None,
                "stop": {"path": "/x/train.py", "line": 3, "function": "step"},
                "samples": [{"bytes": 4 << 20, "tensors": 1}], "target": {"torch": "2.5"}} for r in ranks]
        report = {"ranks": per, "stop": {"how": "pause", "samples": 1}, "seconds": 1.5, "agent_pid": 99, **merged}
        console = Console(record=True, width=200, file=io.StringIO())
        rank_reports.print_text(report, console)
        out = console.export_text()
    finally:
        i18n.set_language("en")
    assert out.startswith("torchrun 作业：2 个 rank（2 个完整报告），torchrun agent PID 99 — 暂停，1 次采样，1.5 秒")
    assert "各 rank，均停在 /x/train.py:3（函数 step）" in out and "跨 rank 发现的问题" in out
    assert "⚠ missing_set_device：rank 1（LOCAL_RANK 1）" in out
    assert "各 rank 的张量没有差别" in out and "各 rank、各设备的 CUDA 用量" in out
    assert "注意：没有测量内存增长" in out


NOTEBOOK = r"""
import io, sys, types
import torch
from stridelens import i18n
from stridelens.inspector import notebook_magics as nm

class Shell:
    user_ns = {}
    def register_magic_function(self, *a, **k):
        pass

shell = Shell()
nm.load(shell)  # the kernel's LANG decides
print("LANGUAGE", i18n.language())
x = torch.randn(4, 6)
losses = [(torch.ones(8, requires_grad=True) * i).sum() for i in range(2)]
shell.user_ns.update(x=x, losses=losses)
print(nm.run_magic(shell, "x.t()")[0])
print(nm.run_magic(shell, "memory --top 2")[0])
print("SUMMARY", nm.summary_line(x.t()[1:], shell.user_ns))
for line in ("", "nope", "memory --top x", "display maybe"):
    try:
        nm.run_magic(shell, line)
    except nm.MagicError as e:
        print("ERROR", e)
"""


def test_notebook_magic_text_in_chinese() -> None:
    env = {**os.environ, "LANG": "zh_CN.UTF-8", "LC_ALL": "", "LC_MESSAGES": "", "COLUMNS": "160"}
    out = subprocess.run([sys.executable, "-c", NOTEBOOK], capture_output=True, text=True, timeout=120,
                         env=env, cwd=REPO).stdout
    assert "LANGUAGE zh_CN" in out
    assert "步长" in out and "存储偏移" in out and "非连续：.contiguous()" in out
    assert "各设备上的存活张量" in out and "losses（长度为 2 的 list）让 2 个计算图保持存活" in out
    assert "SUMMARY tensor[5, 4] f32 步长 (1, 6) 偏移 1 非连续 x 的视图" in out
    assert "ERROR 用法：%stridelens EXPR" in out
    assert "ERROR 表达式抛出了 NameError: name 'nope' is not defined" in out
    assert "ERROR --top 需要一个整数，而不是 'x'" in out
    assert "ERROR display 只接受 on 或 off：%stridelens display on" in out
