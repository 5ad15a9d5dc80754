"""Fixtures of the LSP tests (helpers live in helpers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from .helpers import EXAMPLES, Session, start_session, stop_session


@pytest_asyncio.fixture
async def lsp() -> AsyncIterator[Session]:
    client, session = await start_session()
    try:
        yield session
    finally:
        await stop_session(client)


@pytest.fixture
def example_uri() -> Callable[[str], tuple[str, str]]:
    def load(name: str) -> tuple[str, str]:
        path = EXAMPLES / name
        return path.as_uri(), path.read_text(encoding="utf-8")

    return load
