"""The compiled-code cache of lsprotocol's attrs classes (server/lsp/generated_code_cache.py),
seen from outside: a real server writes it, a second one reads it without rewriting it, and
a broken, foreign or disabled cache never stops the server from answering."""

from __future__ import annotations

import marshal
import os
import stat
import types
from pathlib import Path

import pytest

from .helpers import EXAMPLES, start_session, stop_session

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

EXAMPLE = EXAMPLES / "view_vs_reshape.py"


async def diagnose_once(cache_dir: str, *, exact: bool = False, env: dict[str, str] | None = None) -> list[str]:
    """Start a server with `STRIDELENS_CACHE_DIR=cache_dir` (and `env`), open the example, and
    return the codes of its diagnostics once analysed (`exact`: after the replayed pass)."""
    client, session = await start_session(env={"STRIDELENS_CACHE_DIR": cache_dir, **(env or {})})
    try:
        uri = EXAMPLE.as_uri()
        session.open(uri, EXAMPLE.read_text(encoding="utf-8"))
        # After the exact pass the first answers have been sent, and their converters cached.
        await session.wait_analyzed(uri, exact=exact)
        return sorted(str(d.code) for d in session.diagnostics(uri))
    finally:
        await stop_session(client)


def cache_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("generated-code.*.marshal"))


def read_cache(path: Path) -> dict[bytes, types.CodeType]:
    with open(path, "rb") as handle:
        data = marshal.load(handle)
    assert isinstance(data, dict)
    return data


async def test_a_second_start_reads_the_cache_and_answers_the_same(tmp_path: Path) -> None:
    first = await diagnose_once(str(tmp_path), exact=True)
    assert "SL101" in first
    (written,) = cache_files(tmp_path)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600  # code is run from it: owner-only
    codes = read_cache(written)
    # lsprotocol alone defines several hundred attrs classes.
    assert len(codes) > 300 and all(isinstance(c, types.CodeType) for c in codes.values())
    before = written.stat().st_mtime_ns

    second = await diagnose_once(str(tmp_path), exact=True)
    assert second == first
    # Everything came from the file, so it was not rewritten.
    assert written.stat().st_mtime_ns == before


async def test_a_corrupt_cache_is_ignored_and_replaced(tmp_path: Path) -> None:
    first = await diagnose_once(str(tmp_path))
    (written,) = cache_files(tmp_path)
    written.write_bytes(b"\x00not a marshal file" * 100)
    os.chmod(written, 0o600)

    assert await diagnose_once(str(tmp_path)) == first
    assert len(read_cache(written)) > 300


async def test_a_cache_others_can_write_is_not_loaded(tmp_path: Path) -> None:
    await diagnose_once(str(tmp_path))
    (written,) = cache_files(tmp_path)
    os.chmod(written, 0o666)  # anyone could have put code in it

    assert "SL101" in await diagnose_once(str(tmp_path))
    # Not trusted, so everything was compiled afresh and saved as a new owner-only file (the
    # server never changes a file's mode: only a new file has 0o600 here).
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


async def test_an_empty_cache_dir_setting_turns_it_off(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert await diagnose_once("", env={"XDG_CACHE_HOME": str(home), "HOME": str(home)})
    assert not list(home.rglob("generated-code.*"))


async def test_an_unwritable_cache_dir_costs_nothing_but_time(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("a file where the cache folder should be")
    assert "SL101" in await diagnose_once(str(blocked))
    assert blocked.read_text() == "a file where the cache folder should be"
