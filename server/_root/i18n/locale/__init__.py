"""Message catalogues (data only): a regular package so installs ship it as one."""
