"""The MLflow API's input checks, as MLflow's server makes them: each raises
`MlflowError` (INVALID_PARAMETER_VALUE) with MLflow's wording."""

from __future__ import annotations

import json

from tracking.errors import invalid

MAX_KEY_LENGTH = 250
MAX_PARAM_VALUE_LENGTH = 6000
MAX_TAG_VALUE_LENGTH = 8000


def shown(value) -> str:
    """A value as MLflow's messages show it (JSON, compact)."""
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def text(value, what: str, limit: int, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if value is None or (required and value == ""):
        raise invalid(f"Missing value for required parameter '{what}'.")
    if not isinstance(value, str):
        raise invalid(f"Invalid value {shown(value)} for parameter '{what}' supplied.")
    if "\x00" in value:
        raise invalid(f"Invalid value for '{what}': NUL characters are not allowed.")
    if len(value) > limit:
        raise invalid(f"'{what}' exceeds the maximum length of {limit} characters.")
    return value


def listed(value, what: str) -> list:
    """A list field (tags, datasets…): absent is empty, anything else but a list refused."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(f"Invalid value {shown(value)[:200]} for parameter '{what}' supplied.")
    return value


def valid_key(value, what: str) -> str:
    key = text(value, what, MAX_KEY_LENGTH)
    if key.startswith("/") or ".." in key.split("/"):
        raise invalid(f"Invalid value '{key}' for parameter '{what}': names may not be paths out.")
    return key


def integer(value, what: str, default=None, minimum=None) -> int | None:
    if value is None or value == "":
        return default
    try:
        number = int(value)
        if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise invalid(f"Invalid value {shown(value)} for parameter '{what}' supplied.") from None
    if abs(number) >= 2**63 or (minimum is not None and number < minimum):
        raise invalid(f"Invalid value {shown(value)} for parameter '{what}' supplied.")
    return number


def param_pair(item) -> tuple[str, str]:
    if not isinstance(item, dict):
        raise invalid("Every param is an object with key and value.")
    key = valid_key(item.get("key"), "key")
    value = item.get("value")
    value = "" if value is None else value
    return key, text(
        str(value) if isinstance(value, int | float) else value,
        "value",
        MAX_PARAM_VALUE_LENGTH,
        required=False,
    )


def tag_pair(item) -> tuple[str, str]:
    if not isinstance(item, dict):
        raise invalid("Every tag is an object with key and value.")
    key = valid_key(item.get("key"), "key")
    return key, text(item.get("value", ""), "value", MAX_TAG_VALUE_LENGTH, required=False)
