"""Runtime side of stridelens: the probe, the debugpy client, attach modes and reports.

Never imports `stridelens.server`.
"""
