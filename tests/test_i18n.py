"""The message catalogue: every msgid of the code translated, placeholders kept, the .po
compiled the way msgfmt does it, and the language chosen as POSIX programs choose it."""

from __future__ import annotations

import gettext
import io
import shutil
import subprocess
from pathlib import Path

import pytest

from stridelens import i18n
from stridelens.i18n import extract
from stridelens.i18n.po import compile_mo, parse_po


@pytest.fixture(autouse=True)
def _english_after() -> object:
    yield None
    i18n.set_language("en")


def test_every_message_of_the_code_is_translated() -> None:
    messages, problems = extract.code_messages()
    assert not problems, problems  # no tr(f"...") or tr("..." + x): a msgid must be literal
    assert len(messages) > 300
    assert extract.compare("zh_CN", messages) == []


def test_a_missing_or_broken_translation_fails() -> None:
    messages, _ = extract.code_messages()
    messages = dict(messages)
    messages["a message nobody translated"] = extract.Msg("a message nobody translated", refs=["x.py:1"])
    problems = extract.compare("zh_CN", messages)
    assert problems == ["zh_CN: no translation for 'a message nobody translated' (x.py:1)"]
    # An unused entry and a translation that lost a placeholder are both reported.
    unused = next(iter(messages))
    del messages[unused]
    del messages["a message nobody translated"]
    assert any("is in the catalogue but not in the code" in p for p in extract.compare("zh_CN", messages))
    assert extract.placeholders("{path}：没有该文件或目录") == {"path"}
    assert extract.placeholders("{path：坏了") == {"<unbalanced braces>"}


def test_rule_docs_and_every_rule_message_are_in_the_catalogue() -> None:
    from stridelens.server.rules import ALL_RULES

    for rule in ALL_RULES.values():
        for text in (rule.summary, rule.doc.what, rule.doc.why, rule.doc.fix):
            assert i18n.translated(text, "zh_CN"), (rule.code, text[:40])


def test_the_po_file_compiles_like_msgfmt(tmp_path: Path) -> None:
    po = extract.po_path("zh_CN")
    ours = gettext.GNUTranslations(io.BytesIO(compile_mo(parse_po(po.read_text(encoding="utf-8")))))
    if shutil.which("msgfmt") is None:
        pytest.skip("GNU msgfmt is not installed")
    mo = tmp_path / "ref.mo"
    # --check validates the syntax and the python-brace-format placeholders of each entry.
    subprocess.run(["msgfmt", "--check", "-o", str(mo), str(po)], check=True, capture_output=True, timeout=60)
    with mo.open("rb") as handle:
        reference = gettext.GNUTranslations(handle)
    messages, _ = extract.code_messages()
    for msgid, msg in messages.items():
        if msg.plural is None:
            assert ours.gettext(msgid) == reference.gettext(msgid)
        else:
            assert ours.ngettext(msgid, msg.plural, 2) == reference.ngettext(msgid, msg.plural, 2)


def test_po_reader_handles_continuations_escapes_plurals_and_fuzzy() -> None:
    text = r'''# comment
msgid ""
msgstr "Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=1; plural=0;\n"

#, fuzzy
msgid "fuzzy one"
msgstr "模糊"

msgid "a \"quoted\" "
"line\n"
msgstr "引号 "
"\"行\"\n"

msgid "{n} file"
msgid_plural "{n} files"
msgstr[0] "{n} 个文件"
'''
    entries = parse_po(text)
    assert [e.msgid for e in entries] == ["", "fuzzy one", 'a "quoted" line\n', "{n} file"]
    assert entries[1].fuzzy and entries[3].msgid_plural == "{n} files"
    catalogue = gettext.GNUTranslations(io.BytesIO(compile_mo(entries)))
    assert catalogue.gettext("fuzzy one") == "fuzzy one"  # fuzzy entries are not used
    assert catalogue.gettext('a "quoted" line\n') == '引号 "行"\n'
    assert catalogue.ngettext("{n} file", "{n} files", 3) == "{n} 个文件"


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("zh-CN", "zh_CN"), ("zh_CN.UTF-8", "zh_CN"), ("zh", "zh_CN"), ("zh-Hans", "zh_CN"),
        ("en_US.UTF-8", "en"), ("C", "en"), ("POSIX", "en"), ("fr_FR.UTF-8", None), ("", None), (None, None),
    ],
)  # fmt: skip
def test_normalize(tag: str | None, expected: str | None) -> None:
    assert i18n.normalize(tag) == expected


def test_environment_order_is_lc_all_then_lc_messages_then_lang() -> None:
    assert i18n.from_environment({"LANG": "zh_CN.UTF-8"}) == "zh_CN"
    assert i18n.from_environment({"LC_MESSAGES": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}) == "en"
    assert i18n.from_environment({"LC_ALL": "zh_CN.UTF-8", "LC_MESSAGES": "C", "LANG": "C"}) == "zh_CN"
    assert i18n.from_environment({"LC_ALL": "", "LANG": "zh_CN.UTF-8"}) == "zh_CN"  # empty is unset
    assert i18n.from_environment({"LANG": "de_DE.UTF-8"}) == "en"  # no German catalogue
    assert i18n.from_environment({}) == "en"


def test_tr_follows_the_language_and_english_scopes() -> None:
    assert i18n.tr("All checks passed!") == "All checks passed!"
    i18n.set_language("zh-CN")
    assert i18n.tr("All checks passed!") == "全部检查通过！"
    assert i18n.tr("not a msgid") == "not a msgid"
    with i18n.english():
        assert i18n.tr("All checks passed!") == "All checks passed!"
    assert i18n.language() == "zh_CN"
    assert i18n.ntr("Found {n} finding", "Found {n} findings", 2).format(n=2) == "发现 2 个问题"


def test_readme_zh_cn_rule_table_is_current() -> None:
    from stridelens.server.rules.catalogue import update_readme

    readme = Path(__file__).resolve().parents[1] / "README.zh-CN.md"
    text = readme.read_text(encoding="utf-8")
    i18n.set_language("zh-CN")
    assert update_readme(text) == text, (
        "run: python -m stridelens.server.rules.catalogue --lang zh-CN --write README.zh-CN.md"
    )
    assert "| SL101 | view-noncontiguous |" in text and "| 错误 |" in text


def test_storage_picture_fits_its_width_in_chinese() -> None:
    from stridelens.server.analysis import analyze_source
    from stridelens.server.analysis.storage_picture import render_storage_picture

    source = "import torch\nx = torch.randn(2, 3, 4)\nxt = x.transpose(0, 1)\nbig = torch.randn(64, 1024)[:, :3]\n"
    analysis = analyze_source(source, "m.py", replay=True)
    english = {line: render_storage_picture(analysis.explain_at(line, 1).fact, width=44) for line in (3, 4)}
    i18n.set_language("zh-CN")
    for line, width in ((3, 44), (3, 30), (4, 44), (4, 30)):
        fact = analysis.explain_at(line, 1).fact
        assert fact is not None
        picture = render_storage_picture(fact, width=width)
        assert picture and all(i18n.columns(row) <= width for row in picture), picture
        # the footer wraps at a word (or, in a run without spaces, a column): never cut with "…"
        assert picture[0].startswith("存储 ") and "步长" in "".join(picture[-2:]) and "…" not in picture[-1]
        if width == 44:
            assert len(picture) == len(english[line])  # the same grid or bar, other words


def test_translated_rule_examples_change_only_comments() -> None:
    import tokenize

    from stridelens.server.rules import ALL_RULES

    def code_tokens(text: str) -> list[tuple[int, str]]:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return [(t.type, t.string) for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]

    for rule in ALL_RULES.values():
        chinese = i18n.translated(rule.doc.example, "zh_CN")
        assert chinese is not None and code_tokens(chinese) == code_tokens(rule.doc.example), rule.code


def test_po_writer_round_trips_any_text() -> None:
    texts = [
        "short",
        "for x in loader:\n    loss.backward()\n    total += loss  # SL201",
        "  two  spaces  and a very long line " * 6,
        'quotes " and \\ backslashes\tand tabs, 中文和 emoji 😀 ' * 3,
        "ends with a newline\n",
    ]
    messages = {t: extract.Msg(t, refs=["t.py:1"]) for t in texts}
    old = {t: extract.Entry(t, ["译文：" + t]) for t in texts}
    entries = {e.msgid: e for e in parse_po(extract.render_po("zh_CN", messages, old)) if e.msgid}
    assert {k: v.msgstr for k, v in entries.items()} == {t: ["译文：" + t] for t in texts}


def test_provenance_notes_translate_their_words_not_their_code() -> None:
    from stridelens.server.analysis.facts import Provenance

    notes = [
        Provenance("copy (96 B)", "reshape(-1) of a non-contiguous tensor", 5),
        Provenance("new tensor", "Linear forward", 8),
        Provenance("view", "indexing [1:, ::2]", 6),
        Provenance("copy", ".to(...) to cuda", 7),
        Provenance("non-contiguous", "x.permute(0, 2, 1)", 3),
    ]
    english = [n.render() for n in notes]
    assert english[0] == "copy (96 B): reshape(-1) of a non-contiguous tensor at line 5"
    i18n.set_language("zh-CN")
    assert [n.render() for n in notes] == [
        "副本（96 B）：对非连续张量执行 reshape(-1)（第 5 行）",
        "新张量：Linear 的前向（第 8 行）",
        "视图：索引 [1:, ::2]（第 6 行）",
        "副本：.to(...) 到 cuda（第 7 行）",
        "非连续：x.permute(0, 2, 1)（第 3 行）",
    ]


def test_rule_card_and_rule_doc_in_chinese() -> None:
    from stridelens.server.lsp.hover import rule_card
    from stridelens.server.rules import ALL_RULES
    from stridelens.server.rules.catalogue import render_rule

    english = rule_card("SL213")
    i18n.set_language("zh-CN")
    card = rule_card("SL213")
    assert english is not None and card is not None
    assert card.startswith("**SL213** `inplace-on-saved` (错误) — 原地写入一个 autograd 为反向传播保存的张量")
    assert "**规则说明** 在启用梯度时" in card and "# SL213：sigmoid 保存了 h" in card
    assert card.splitlines()[-1] == english.splitlines()[-1].replace("Documentation", "文档")
    doc = render_rule(ALL_RULES["SL215"])
    assert "## 为什么重要\n`scaler.scale(loss).backward()` 得到的梯度乘上了损失缩放因子" in doc
    assert doc.endswith('在整个项目中屏蔽，则在 pyproject.toml 的 `[tool.stridelens]` 中写 `ignore = ["SL215"]`。')
