"""Hostile values, and what a field may do with each (the test_*.py modules here send them).

A value either must be refused by a field (a NUL byte anywhere, a list where a string
belongs, a number past the field's bounds) or may be accepted: then it has to come back
exactly as sent. `must_refuse` reads the field's OpenAPI schema to tell which.

37 values: 15 texts (oversized, NUL, lone surrogate, bidi override, zero-width and
combining characters, emoji, markup...), 6 path traversals, 16 wrong types and numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

INT32_MAX = 2**31 - 1
HUGE = 100_000  # characters: past every bounded field, far past any sensible name


@dataclass(frozen=True)
class Hostile:
    id: str
    value: Any = None
    # A JSON fragment sent as it is, for what json.dumps cannot write (a lone surrogate
    # escape, NaN, a number too large for a float).
    raw: str | None = None
    # Never storable, whatever the field: PostgreSQL refuses NUL in text and jsonb, and
    # a lone surrogate cannot be encoded at all.
    unstorable: bool = False

    def fragment(self) -> str:
        return self.raw if self.raw is not None else json.dumps(self.value)

    @property
    def form_text(self) -> str:
        """The value as a form field carries it (forms only hold text)."""
        if isinstance(self.value, str):
            return self.value
        if self.value is None:
            return ""
        return json.dumps(self.value)


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


TEXT = [
    Hostile("huge-100k", "x" * HUGE),
    Hostile("nul-byte", "probe\x00name", unstorable=True),
    Hostile("lone-surrogate", raw='"probe\\ud800name"', unstorable=True),
    Hostile("rtl-override", "probe\u202egnp.exe"),
    Hostile("zero-width", "pro\u200bbe\u200d\ufeff"),
    Hostile("emoji-zwj", "🚀 👩\u200d💻 probe"),
    Hostile("combining", "probe" + "e\u0301\u0336" * 20),
    Hostile("overlong-name", "n" * 256),
    Hostile("wide-chars", "é" * 300),
    Hostile("control-chars", "probe\x1b[31m\r\nline"),
    Hostile("empty", ""),
    Hostile("blank", "   "),
    Hostile("markup", "<script>alert(1)</script>"),
    Hostile("sql", "'; DROP TABLE auth_user; --"),
    Hostile("format-string", "%s%n{0}{__class__}${HOME}"),
]

PATHS = [
    Hostile("dotdot", "../../etc/passwd"),
    Hostile("absolute", "/etc/passwd"),
    Hostile("backslashes", "..\\..\\windows\\win.ini"),
    Hostile("inner-dotdot", "a/../../b"),
    Hostile("drive-letter", "C:\\evil"),
    Hostile("nul-in-name", "evil.txt\x00.png", unstorable=True),
]

TYPES = [
    Hostile("null", None),
    Hostile("true", True),
    Hostile("list", ["probe"]),
    Hostile("object", {"probe": 1}),
    Hostile("int", 42),
    Hostile("negative", -1),
    Hostile("zero", 0),
    Hostile("float", 1.5),
    Hostile("huge-int", 10**30),
    Hostile("int64-max+1", 2**63),
    Hostile("int32-max+1", 2**31),
    Hostile("nan-string", "NaN"),
    Hostile("numeric-string", "12"),
    Hostile("nan-literal", raw="NaN", unstorable=True),
    Hostile("inf-by-overflow", raw="1e400", unstorable=True),
    Hostile("deep-200", nested(200)),
]

CORPUS = TEXT + PATHS + TYPES
BY_ID = {h.id: h for h in CORPUS}
assert len(BY_ID) == len(CORPUS), "corpus ids must be unique"

# Every field gets the values that most surely break its kind of field; a slice of the
# rest is spread over an endpoint's fields (see `sample`).
ALWAYS = {
    "string": ("nul-byte", "huge-100k", "list"),
    "integer": ("huge-int", "float", "nan-string"),
    "boolean": ("nan-string", "object"),
    "array": ("object", "huge-100k"),
    None: ("nul-byte", "deep-200"),  # free JSON
}


def sample(
    fields: dict[str, dict], offset: int = 0, size: int = len(CORPUS)
) -> dict[str, list[Hostile]]:
    """Per field (name -> OpenAPI schema): its kind's ALWAYS values, plus a share of a
    slice of the rest (`size` values from `offset`, round the corpus), so that a caller
    moving the offset along gets every value to every kind of field, without sending
    every value to every field."""
    chosen = {
        name: [BY_ID[i] for i in ALWAYS.get(spec.get("type"), ALWAYS[None])]
        for name, spec in fields.items()
    }
    names = sorted(fields)
    for i in range(min(size, len(CORPUS)) if names else 0):
        h = CORPUS[(offset + i) % len(CORPUS)]
        if not any(h in values for values in chosen.values()):
            chosen[names[i % len(names)]].append(h)
    return chosen


TRUE_WORDS = {"true", "t", "yes", "y", "on", "1", "false", "f", "no", "n", "off", "0"}


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool | list | dict) or value is None:
        return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def must_refuse(h: Hostile, schema: dict) -> bool:
    """True when no field of this schema may accept the value."""
    if h.unstorable:
        return True
    value = h.value
    kind = schema.get("type")
    if value is None or (value == "" and schema.get("nullable")):
        return not schema.get("nullable", False)  # a related field reads "" as null
    if kind == "string":
        if schema.get("format") == "binary":
            return True  # a file field sent JSON
        if isinstance(value, bool | list | dict):
            return True
        text = str(value)
        if "enum" in schema:
            return text not in schema["enum"]
        if schema.get("format") == "date-time":
            return True  # nothing in the corpus is a date
        limit = schema.get("maxLength")
        return limit is not None and len(text.strip()) > limit
    if kind == "integer":
        number = _as_int(value)
        if number is None:
            return True
        low, high = schema.get("minimum"), schema.get("maximum", INT32_MAX)
        return (low is not None and number < low) or number > high or number < -INT32_MAX
    if kind == "boolean":
        return not (isinstance(value, bool) or str(value).lower() in TRUE_WORDS)
    if kind == "array":
        if not isinstance(value, list):
            return True
        item = schema.get("items", {})
        return any(must_refuse(Hostile("item", v), item) for v in value) if item else False
    return False  # free JSON: each such field has its own cases in the test module


def round_trips(sent: Any, stored: Any) -> bool:
    """An accepted value comes back as it was sent (strings may lose outer blanks)."""
    if isinstance(sent, str) and not sent.strip():
        return True  # left blank: the server may fill in a default
    if isinstance(sent, str) and isinstance(stored, str):
        return stored in (sent, sent.strip())
    if isinstance(stored, int) and not isinstance(stored, bool):
        return _as_int(sent) == stored
    return True
