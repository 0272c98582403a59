"""The one formatter: sizes, durations, numbers and stored values read the same everywhere."""

import math
from datetime import timedelta

import pytest
from django.template import Context, Template

from core.formatting import (
    format_duration,
    format_number,
    format_size,
    format_size_mb,
    format_value,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1280, "1.3 KiB"),  # half up, as the browser's toFixed after gantry.js's rounding
        (19_100, "18.7 KiB"),  # the files: 19.1 KB on upload, 18.6 KB on the version page
        (1024 * 1024 - 20, "1.0 MiB"),  # never "1024.0 KiB"
        (2 * 1024**3, "2.0 GiB"),
        (5 * 1024**5, "5.0 PiB"),
        (None, "—"),
        ("", "—"),
    ],
)
def test_sizes_are_binary_with_one_decimal(value, expected):
    assert format_size(value) == expected


def test_memory_in_mib_follows_the_byte_rule():
    assert format_size_mb(2048) == format_size(2 * 1024**3) == "2.0 GiB"
    assert format_size_mb(512) == "512.0 MiB"
    assert format_size_mb(0) == "0 B"
    assert format_size_mb(None) == "—"


def test_the_same_bytes_read_the_same_in_every_template():
    """Uploads, version pages, artifacts and model files all go through `size`."""
    rendered = Template(
        "{% load gantry %}{{ a|size }}|{{ b|size }}|{{ mb|size_mb }}|{{ mb|filesizeformat_mb }}"
    ).render(Context({"a": 19_100, "b": 19_100, "mb": 2048}))
    assert rendered == "18.7 KiB|18.7 KiB|2.0 GiB|2.0 GiB"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.4, "400 ms"),
        (5.25, "5.2 s"),
        (42, "42 s"),
        (192, "3 min 12 s"),
        (3600, "1 h"),
        (7260, "2 h 1 min"),
        (timedelta(days=1, hours=3, minutes=5), "1 d 3 h"),
        (None, "—"),
    ],
)
def test_durations_use_the_two_largest_units(value, expected):
    assert format_duration(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (12345, "12,345"),
        (0.123456789012345, "0.1235"),
        (0.30000000000000004, "0.3"),
        (2.0000000000000004, "2"),
        (123.456789, "123.5"),
        (98765.4321, "98,765"),
        (0.0000123456, "1.235e-05"),
        (1e20, "1e+20"),
        (-0.5, "-0.5"),
        (0.0, "0"),
        (math.nan, "NaN"),
        (math.inf, "∞"),
        (None, "—"),
    ],
)
def test_numbers_have_four_significant_digits_not_sixteen(value, expected):
    assert format_number(value) == expected


def test_metric_filter_shortens_a_long_float():
    rendered = Template("{% load gantry %}{{ loss|metric }}").render(
        Context({"loss": 0.06543219876543211})
    )
    assert rendered == "0.06543"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "—"),
        (True, "yes"),
        (3, "3"),
        ("", "—"),
        ({}, "—"),
        ({"b": None, "a": [1, 2]}, '{"a": [1, 2], "b": null}'),
        ("cpu", "cpu"),
    ],
)
def test_stored_values_are_typed_not_python_reprs(value, expected):
    assert format_value(value) == expected
    assert "None" not in format_value(value)


def test_when_shows_relative_time_with_the_absolute_on_hover():
    from django.utils import timezone

    moment = timezone.now() - timedelta(minutes=5, seconds=3)
    rendered = Template("{% load gantry %}{{ t|when }}").render(Context({"t": moment}))
    assert ">5 min ago</time>" in rendered
    assert f'datetime="{moment.isoformat()}"' in rendered
    assert 'title="' + timezone.localtime(moment).strftime("%Y-%m-%d %H:%M") in rendered
