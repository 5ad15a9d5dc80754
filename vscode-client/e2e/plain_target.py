"""Step 4's debuggee: plain Python, no torch. The interpreter that runs it has no debugpy, so the
extension's bundled debugpy debugs it."""

squares = [n * n for n in range(5)]
total = sum(squares)  # the breakpoint
print("TOTAL", total)
