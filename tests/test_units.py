"""One byte formatter everywhere: binary units, as torch's memory reports print them. The
probe (which runs in the target with the standard library only) repeats it: they agree."""

from __future__ import annotations

import pytest

from stridelens.inspector import probe
from stridelens.server.units import human_bytes

VALUES = [0, 1, 1023, 1024, 1536, 8192, 1 << 20, 40 * 10**6, 51_200_000, 1 << 30, 100 << 30, 3 << 40, 10**15]


@pytest.mark.parametrize("n", VALUES)
def test_the_probe_and_the_server_print_bytes_alike(n: int) -> None:
    assert probe._human(n) == human_bytes(n)


def test_binary_units_up_to_tebibytes() -> None:
    assert [human_bytes(n) for n in (512, 8192, 51_200_000, 100 << 30, 3 << 40)] == [
        "512 B", "8.0 KiB", "48.8 MiB", "100.0 GiB", "3.0 TiB",
    ]
