"""mkdocs hooks (mkdocs.yml `hooks:`): the pages and tables that are generated, never typed.

- `rules/SL101.md` ... : one page per rule, the text of `stridelens rule CODE`;
- `<!-- generated: rule-table -->` in a page: the full rule table, each code linked to its page;
- `<!-- generated: cli -->`: the CLI reference, from the argparse parsers;
- `zh-CN/index.md`: README.zh-CN.md; `zh-CN/rules.md`, `zh-CN/cli.md`: the same in Chinese.

A link from a page to a file of the repository outside docs/ (`../examples/demo.py`, right on
GitHub) has no page on the site: it is shown as its text. A link to anything else that is not a
page stays, and the strict build fails on it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

from stridelens.server.cli import reference

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")
LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def _zh_readme() -> str:
    """README.zh-CN.md as the page zh-CN/index.md: its links made relative to that page."""
    text = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    text = text.replace("](README.md)", "](../index.md)")
    text = re.sub(r"\]\(docs/", "](../", text)
    # Any other relative link was written from the repository's root.
    return re.sub(r"\]\((?!\.\./|[a-z]+:|#)([^)\s]+)\)", r"](../../\1)", text)


def _zh_rules() -> str:
    with reference.language("zh-CN"):
        table = reference.rule_table(link="#{code}")
        docs = [re.sub(r"^(#+) ", r"#\1 ", page, flags=re.M) for page in reference.rule_pages().values()]
    docs = [re.sub(r"^## (SL\d{3}) (.*)$", r"## \1 \2 {#\1}", page, count=1, flags=re.M) for page in docs]
    return "# 规则\n\n由各规则自身的文档生成（`stridelens rule --all --lang zh-CN`）。\n\n" + table + "\n" + "\n".join(docs)


def _zh_cli() -> str:
    with reference.language("zh-CN"):
        body = reference.cli_reference()
    return "# 命令行参考\n\n由 `stridelens` 的 argparse 解析器生成（与 `stridelens --lang zh-CN COMMAND --help` 相同）。\n\n" + body


def on_files(files: Files, config: Any) -> Files:
    with reference.language("en"):
        for code, page in reference.rule_pages().items():
            files.append(File.generated(config, f"rules/{code}.md", content=page, inclusion=InclusionLevel.NOT_IN_NAV))
    files.append(File.generated(config, "zh-CN/index.md", content=_zh_readme()))
    files.append(File.generated(config, "zh-CN/rules.md", content=_zh_rules()))
    files.append(File.generated(config, "zh-CN/cli.md", content=_zh_cli()))
    return files


def _generated(name: str) -> str:
    with reference.language("en"):
        if name == "rule-table":
            return reference.rule_table()
        if name == "cli":
            return reference.cli_reference()
    raise ValueError(f"unknown generated block {name!r}")


def _repository_links(markdown: str, page_dir: Path) -> str:
    def plain(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith("mailto:"):
            return match.group(0)
        path = (page_dir / target).resolve()
        inside_docs = path == DOCS or DOCS in path.parents
        if not inside_docs and path.exists() and ROOT in path.parents:
            return match.group(1)
        return match.group(0)

    return LINK.sub(plain, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    markdown = MARKER.sub(lambda m: _generated(m.group(1)), markdown)
    if page.file.generated_by is None and page.file.abs_src_path:
        return _repository_links(markdown, Path(page.file.abs_src_path).parent)
    # A generated page: its links are written from its place under docs/.
    return _repository_links(markdown, DOCS / Path(page.file.src_uri).parent)
