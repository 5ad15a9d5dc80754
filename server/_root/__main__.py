"""`python -m stridelens ...` runs the command line (used by editor clients)."""

from stridelens.server.cli import main

raise SystemExit(main())
