"""Language server features: one module per LSP feature, wired in server.py.

Importing this package first gives attrs and cattrs the compiled-code cache
(generated_code_cache.py), before any module here imports lsprotocol, whose ~570 attrs
classes would otherwise be compiled afresh at every server start.
"""

from stridelens.server.lsp import generated_code_cache

generated_code_cache.install()
