"""The executor's log and Gantry's pages name the same size for the same bytes (the log
said "4.1 KB" where the version page said "4.0 KiB")."""

import pytest

from core.formatting import format_size
from executor.staging import _human

SIZES = [0, 1, 512, 1023, 1024, 1075, 1280, 4196, 19_100, 1024**2 - 40, 5 * 1024**2 + 1,
         2 * 1024**3, 3 * 1024**4 + 7, 2**62]


@pytest.mark.parametrize("n", SIZES)
def test_the_executor_formats_a_size_as_the_pages_do(n):
    assert _human(n) == format_size(n)


def test_binary_units_with_one_decimal():
    assert [_human(n) for n in (512, 4196, 19_100, 2 * 1024**3)] == [
        "512 B", "4.1 KiB", "18.7 KiB", "2.0 GiB"
    ]
