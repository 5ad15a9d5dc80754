"""Language server features: one module per LSP feature, wired in server.py."""
