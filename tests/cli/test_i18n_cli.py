"""The command line in Chinese: `--lang zh-CN` or `LANG=zh_CN.UTF-8` translate the text
output; JSON and SARIF stay byte for byte the same (the real console script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stridelens.i18n import columns

BIN = Path(sys.executable).with_name("stridelens")
# A Chinese comment and an emoji before the finding: columns count code points.
SOURCE = (
    "import torch\n"
    "x = torch.randn(2, 3, 4)\n"
    "名字 = '😀'; y = x.transpose(0, 1).view(-1)  # 中文\n"
    "losses = []\n"
)


def run(*args: str, cwd: Path, lang: str = "C.UTF-8") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "LANG": lang, "LC_ALL": "", "LC_MESSAGES": ""}
    return subprocess.run([str(BIN), *args], cwd=cwd, capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(SOURCE, encoding="utf-8")
    return tmp_path


def test_check_text_in_chinese_from_flag_and_from_lang(tree: Path) -> None:
    english = run("check", "model.py", cwd=tree)
    by_flag = run("check", "--lang", "zh-CN", "model.py", cwd=tree)
    by_env = run("check", "model.py", cwd=tree, lang="zh_CN.UTF-8")
    assert english.returncode == by_flag.returncode == by_env.returncode == 1
    assert by_flag.stdout == by_env.stdout
    line = SOURCE.splitlines()[2]
    col = line.index(".view") + 1  # code points, as in English
    first = by_flag.stdout.splitlines()[0]
    assert first.startswith(f"model.py:3:{col}: SL101 这里的 `.view()` 会报错：`x.transpose(0, 1)` 不是连续的")
    assert english.stdout.splitlines()[0].startswith(f"model.py:3:{col}: SL101 `.view()` raises here")
    assert "  = 修复：把 `.view(` 替换为 `.reshape(`" in by_flag.stdout
    assert by_flag.stdout.rstrip().endswith("发现 1 个问题；其中 1 个可用 `stridelens check --fix` 修复。")
    # The caret sits under `.view(-1)` in terminal columns (名字 and 😀 are two columns each).
    source_row, caret_row = by_flag.stdout.splitlines()[1:3]
    prefix = source_row[: source_row.index(".view")]
    wide = sum(1 for ch in prefix if ch in "名字😀")
    assert caret_row.index("^") == len(prefix) + wide
    assert caret_row.count("^") == len(".view(-1)")


def test_json_and_sarif_are_the_same_in_every_language(tree: Path) -> None:
    for fmt in ("json", "sarif"):
        english = run("check", "--format", fmt, "model.py", cwd=tree)
        by_flag = run("check", "--format", fmt, "--lang", "zh-CN", "model.py", cwd=tree)
        by_env = run("check", "--format", fmt, "model.py", cwd=tree, lang="zh_CN.UTF-8")
        assert english.stdout == by_flag.stdout == by_env.stdout
        assert english.returncode == by_flag.returncode == 1
    findings = json.loads(english.stdout) if fmt == "json" else None
    assert findings is None or findings[0]["message"].startswith("`.view()` raises")
    explain = [run("explain", "--format", "json", "model.py:3:21", cwd=tree, lang=lang) for lang in ("C", "zh_CN.UTF-8")]
    assert explain[0].stdout == explain[1].stdout and json.loads(explain[0].stdout)["strides"] == [4, 12, 1]


def test_rule_docs_explain_and_errors_in_chinese(tree: Path) -> None:
    doc = run("rule", "SL201", "--lang", "zh-CN", cwd=tree)
    assert doc.returncode == 0
    assert doc.stdout.startswith("# SL201 graph-kept-alive\n\n严重级别：警告。")
    assert run("--lang", "zh-CN", "rule", "SL201", cwd=tree).stdout == doc.stdout  # before the command too
    assert "## 为什么重要\n带 `grad_fn` 的张量会让整个计算图保持存活" in doc.stdout
    listing = run("rule", "--all", cwd=tree, lang="zh_CN.UTF-8").stdout
    assert "SL101  view-noncontiguous" in listing and "运行时会报错" in listing
    # `rule --format json` is the machine interface: English.
    assert json.loads(run("rule", "SL201", "--format", "json", "--lang", "zh-CN", cwd=tree).stdout)["why"].startswith("A tensor")
    card = run("explain", "--lang", "zh-CN", "model.py:3:21", cwd=tree)
    assert card.returncode == 0
    rows = dict(line.split(None, 1) for line in card.stdout.splitlines()[1:7])
    assert rows["步长"] == "(4, 12, 1)" and rows["连续"] == "否" and rows["形状"] == "(3, 2, 4)"
    # Values line up in terminal columns although the Chinese labels are two columns a character.
    table = card.stdout.splitlines()[1:7]
    starts = {columns(line[: line.rindex(line.split(None, 1)[1])]) for line in table}
    assert len(starts) == 1
    missing = run("check", "--lang", "zh-CN", "nope.py", cwd=tree)
    assert missing.returncode == 2 and "stridelens check：nope.py：没有该文件或目录" in missing.stderr
    unknown = run("check", "--lang", "fr", "model.py", cwd=tree)
    assert "no messages in 'fr'" in unknown.stderr and "`.view()` raises here" in unknown.stdout


def test_help_and_usage_errors_in_chinese(tree: Path) -> None:
    zh = run("--lang", "zh-CN", "check", "--help", cwd=tree)
    assert zh.returncode == 0
    assert zh.stdout.startswith("用法：stridelens check [-h] [--format {text,json,sarif}]")
    assert "\n选项：\n  -h, --help            显示本帮助信息并退出\n" in zh.stdout
    assert "  --fix                 就地应用安全修复\n" in zh.stdout  # option names stay as they are
    assert "位置参数：\n  PATH                  文件或目录（递归遍历）" in zh.stdout
    assert run("check", "--help", cwd=tree, lang="zh_CN.UTF-8").stdout == zh.stdout
    assert run("check", "--help", "--lang", "zh-CN", cwd=tree).stdout == zh.stdout  # after the command too
    english = run("check", "--help", cwd=tree)
    assert english.stdout.startswith("usage: stridelens check [-h]")
    assert "\noptions:\n  -h, --help            show this help message and exit\n" in english.stdout
    assert "  --fix                 apply safe fixes in place\n" in english.stdout
    top = run("--help", cwd=tree, lang="zh_CN.UTF-8").stdout
    assert "--version   显示程序版本号并退出" in top and "inspect   检查运行中进程里的张量（通过 debugpy）" in top
    # argparse's own errors.
    bogus = run("--lang", "zh-CN", "check", "--bogus", "model.py", cwd=tree)
    assert bogus.returncode == 2 and "stridelens：错误：无法识别的参数：--bogus" in bogus.stderr
    assert bogus.stderr.startswith("用法：stridelens")
    missing = run("check", cwd=tree, lang="zh_CN.UTF-8")
    assert missing.returncode == 2 and "stridelens check：错误：缺少以下必需参数：PATH" in missing.stderr
    choice = run("check", "--format", "xml", "model.py", cwd=tree, lang="zh_CN.UTF-8")
    assert "参数 --format：无效的选择：'xml'（可选值：'text', 'json', 'sarif'）" in choice.stderr
    # The arguments of a launched script are not read for --lang.
    assert "用法" not in run("inspect", "--help", "--", "--lang", "zh-CN", cwd=tree).stdout
