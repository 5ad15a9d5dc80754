"""Entry points of the real-code oracle, one module per repository (see driver.py).

Each module defines `ENTRIES: dict[str, Callable[[dict[str, Any]], None]]`: for every verbatim
file `sources/<name>.py` it covers, a function that is given the file's executed namespace and
uses the code the way its own repository does, on tiny sizes.
"""
