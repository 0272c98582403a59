"""One way to show sizes, durations, numbers and stored values, for every page.

The template filters in core/templatetags/gantry.py and static/gantry/gantry.js
(`gantryFormat.size`, used by the upload page) follow the same rules, so the same
bytes read the same wherever they appear:

- sizes: binary units (B, KiB, MiB, GiB, TiB, PiB), one decimal above 1 KiB;
- durations: the two largest units ("3 min 12 s", "2 h 5 min", "4 d 3 h");
- numbers: counts with thousands separators, measurements with four significant
  digits (never 16 decimals), very small or very large ones in scientific notation.
"""

import json
import math
from datetime import timedelta

DASH = "—"
UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def _missing(value) -> bool:
    return value is None or value == ""


def format_size(value) -> str:
    """Bytes as a readable size: 19100 -> '18.7 KiB', 2 * 1024**3 -> '2.0 GiB'."""
    if _missing(value):
        return DASH
    try:
        size = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(size):
        return DASH
    sign = "-" if size < 0 else ""
    size = abs(size)
    if size < 1024:
        return f"{sign}{math.floor(size + 0.5)} B"
    unit = 0
    while size >= 1024 and unit < len(UNITS) - 1:
        size /= 1024
        unit += 1
    # 1023.96 KiB rounds to "1024.0 KiB"; say "1.0 MiB" instead.
    if _tenths(size) >= 1024 and unit < len(UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{sign}{_tenths(size):.1f} {UNITS[unit]}"


def _tenths(x: float) -> float:
    """Half up to one decimal, the same float operations as gantry.js (Python's own
    rounding is half-even: 1.25 KiB would read 1.2 here and 1.3 in the browser)."""
    return math.floor(x * 10 + 0.5) / 10


def format_size_mb(value) -> str:
    """MiB (how memory is stored) by the same rule as bytes: 2048 -> '2.0 GiB'."""
    if _missing(value):
        return DASH
    try:
        return format_size(float(value) * 1024 * 1024)
    except (TypeError, ValueError):
        return str(value)


def format_duration(value) -> str:
    """Seconds (or a timedelta) as the two largest units: 192 -> '3 min 12 s'."""
    if _missing(value):
        return DASH
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            return str(value)
    if not math.isfinite(seconds):
        return DASH
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{sign}{seconds:.1f} s"
    whole = round(seconds)
    parts = []
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if whole >= length or parts:
            amount, whole = divmod(whole, length)
            parts.append((amount, unit))
    # The two largest units, dropping a zero second one ("2 h", not "2 h 0 min").
    shown = parts[:2]
    if len(shown) == 2 and shown[1][0] == 0:
        shown = shown[:1]
    return sign + " ".join(f"{amount} {unit}" for amount, unit in shown)


def format_number(value, digits: int = 4) -> str:
    """A count or a measurement: 12345 -> '12,345', 0.123456789 -> '0.1235',
    0.0000123 -> '1.23e-05', 3.0 -> '3'."""
    if _missing(value):
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    if number == 0:
        return "0"
    magnitude = abs(number)
    if magnitude >= 1e15 or magnitude < 1e-3:
        mantissa, exponent = f"{number:.{digits - 1}e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{exponent}"
    if magnitude >= 10 ** (digits - 1):
        # At least as many integer digits as significant ones: no decimals, separators.
        return f"{round(number):,}"
    text = f"{number:.{digits}g}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_ago(seconds: float) -> str:
    """How long ago, in its largest unit: 200 -> '3 min ago'."""
    if seconds < 60:
        return "just now"
    amount, unit = format_duration(seconds).split(" ")[:2]
    return f"{amount} {unit} ago"


def format_value(value) -> str:
    """A stored value (an audit detail, a parameter) typed for reading: None as '—',
    booleans as yes/no, numbers by format_number, lists and objects as JSON."""
    if value is None:
        return DASH
    if isinstance(value, bool | int | float):
        return format_number(value)
    if isinstance(value, dict | list | tuple):
        if not value:
            return DASH
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    if value == "":
        return DASH
    return str(value)
