"""The language server in Chinese: initialize's `locale`, the `stridelens.locale` setting,
and ranges that do not move when the messages do (a real server over pytest-lsp)."""

from __future__ import annotations

import pytest

from .helpers import start_session, stop_session

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

# Chinese comments and an emoji before the findings: UTF-16 columns differ from code points.
SOURCE = """import torch

# 中文注释：先转置，再 view 😀
x = torch.randn(2, 3, 4)
xt = x.transpose(0, 1)  # 非连续 😀
fails = xt.view(-1)  # ❌ 运行时报错
ok = x.permute(2, 0, 1).view(4, 6)
"""
URI = "file:///tmp/stridelens-i18n/model.py"


async def _findings_and_hovers(locale: str | None, init_options: dict | None = None, env: dict | None = None):
    client, session = await start_session(init_options=init_options, locale=locale, env=env)
    try:
        session.open(URI, SOURCE)
        await session.wait_analyzed(URI, exact=True)
        diagnostics = [(d.range, d.code, d.message) for d in session.diagnostics(URI)]
        card = await session.hover(URI, 4, 1)  # `xt`
        view_op = await session.hover(URI, 5, SOURCE.splitlines()[5].index("view") + 1)
        return diagnostics, card, view_op
    finally:
        await stop_session(client)


def _has_chinese(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


async def test_locale_zh_cn_gives_chinese_diagnostics_and_hovers_at_the_same_ranges() -> None:
    english = await _findings_and_hovers(None, env={"LANG": "C.UTF-8", "LC_ALL": "", "LC_MESSAGES": ""})
    chinese = await _findings_and_hovers("zh-CN", env={"LANG": "C.UTF-8", "LC_ALL": "", "LC_MESSAGES": ""})
    (en_diags, en_card, en_op), (zh_diags, zh_card, zh_op) = english, chinese
    assert [d[1] for d in zh_diags] == [d[1] for d in en_diags] == ["SL101"]
    # Same range (UTF-16 columns after the emoji of line 5), message in Chinese.
    assert [d[0] for d in zh_diags] == [d[0] for d in en_diags]
    line = SOURCE.splitlines()[5]
    start = line.index(".view")
    assert zh_diags[0][0].start.character == start and zh_diags[0][0].end.character == line.index("  #")
    message = zh_diags[0][2]
    assert message.startswith("这里的 `.view()` 会报错：`xt` 不是连续的（形状 (3, 2, 4)，步长 (4, 12, 1)）")
    assert "view size" not in message and en_diags[0][2].startswith("`.view()` raises here")
    # The tensor card: Chinese labels, the same facts and range.
    assert zh_card is not None and en_card is not None and zh_card.range == en_card.range
    card = zh_card.contents.value
    assert "**步长** `(4, 12, 1)`" in card and "**连续** 否" in card and "**内存** `x` 的视图——与它共享存储" in card
    assert "非连续：transpose(0, 1)（第 5 行）" in card
    assert "**strides** `(4, 12, 1)`" in en_card.contents.value
    # The operation hover on `view`.
    assert zh_op is not None and en_op is not None and zh_op.range == en_op.range
    assert "**在运行时会报错**" in zh_op.contents.value and _has_chinese(zh_op.contents.value)


async def test_locale_setting_overrides_the_client_locale() -> None:
    # VS Code in English with the extension's own setting on zh-CN, and the reverse.
    diags, card, _ = await _findings_and_hovers("en", init_options={"locale": "zh-CN"})
    assert _has_chinese(diags[0][2]) and card is not None and "**步长**" in card.contents.value
    diags, card, _ = await _findings_and_hovers("zh-CN", init_options={"locale": "en"})
    assert not _has_chinese(diags[0][2]) and card is not None and "**strides**" in card.contents.value


async def test_without_a_locale_the_server_follows_lang() -> None:
    diags, _, _ = await _findings_and_hovers(None, env={"LANG": "zh_CN.UTF-8", "LC_ALL": "", "LC_MESSAGES": ""})
    assert _has_chinese(diags[0][2])


async def test_changing_the_locale_setting_republishes_in_the_new_language() -> None:
    from lsprotocol import types

    client, session = await start_session(locale="en", configuration={"locale": "auto"})
    try:
        session.open(URI, SOURCE)
        await session.wait_analyzed(URI, exact=True)
        before = session.diagnostics(URI)
        assert not _has_chinese(before[0].message)
        since = len(session.analyzed)
        client.set_configuration({"locale": "zh-CN"}, section="stridelens")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await session.wait_analyzed(URI, exact=True, since=since)
        after = session.diagnostics(URI)
        assert _has_chinese(after[0].message) and after[0].range == before[0].range
        card = await session.hover(URI, 4, 1)
        assert card is not None and "**步长**" in card.contents.value
    finally:
        await stop_session(client)
