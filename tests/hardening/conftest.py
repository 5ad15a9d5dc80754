"""The inspector's end-to-end fixtures (real debugpy targets, the CLI as a subprocess), shared."""

from tests.inspector.conftest import inspect_cli, script, target

__all__ = ["inspect_cli", "script", "target"]
