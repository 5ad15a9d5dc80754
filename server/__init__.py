"""Editor-facing side of stridelens: static analysis engine, rules, LSP features, CLI."""
