"""The API's parsers: DRF's, refusing up front what nothing behind them could handle.

Every text value of a request body is checked here once, whatever field it is meant
for: PostgreSQL stores no NUL character (in text or jsonb), and a lone surrogate is no
character at all, so neither can be stored, looked up or even echoed in an error.
DRF's CharField refuses them too, but related, choice and JSON fields do not.
"""

import json
import math

from django.conf import settings
from rest_framework import exceptions, parsers
from rest_framework.utils.json import strict_constant

MAX_DEPTH = 64  # Gantry's bodies are a few levels deep; the decoder's own limit is a crash


class Unreadable(ValueError):
    """JSON Gantry does not take; `field` is the top-level member it came in, if any."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"Out of range float values are not JSON compliant: {text[:40]!r}")
    return value


def _text_problem(text: str, nul: bool = False) -> str | None:
    if "\x00" in text and not nul:
        return "Null characters are not allowed."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "Lone surrogates (\\ud800 to \\udfff) are not characters."
    return None


def loads(body: bytes, encoding: str = "utf-8", *, nul: bool = False):
    """JSON as Gantry takes it: no NaN or infinite numbers, no nesting deeper than
    MAX_DEPTH (deep enough, the decoder raises RecursionError), no lone surrogates, and
    no NUL in any text unless `nul`. Raises Unreadable; walks without recursion."""
    try:
        data = json.loads(
            body.decode(encoding), parse_constant=strict_constant, parse_float=_finite_float
        )
    except RecursionError:
        raise Unreadable(f"nested deeper than {MAX_DEPTH} levels.") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise Unreadable(str(exc)) from None
    members = data.items() if isinstance(data, dict) else [(None, data)]
    for field, value in members:
        if field is not None and (problem := _text_problem(field, nul)):
            raise Unreadable(problem)
        stack = [(value, 2)]
        while stack:
            item, depth = stack.pop()
            if isinstance(item, str):
                if problem := _text_problem(item, nul):
                    raise Unreadable(problem, field)
            elif isinstance(item, dict | list):
                if depth > MAX_DEPTH:
                    raise Unreadable(f"nested deeper than {MAX_DEPTH} levels.")
                if isinstance(item, dict):
                    stack.extend((key, depth) for key in item)
                    item = item.values()
                stack.extend((child, depth + 1) for child in item)
    return data


def _refusal(exc: Unreadable) -> exceptions.APIException:
    if exc.field is not None:
        return exceptions.ValidationError({exc.field: [str(exc)]})
    return exceptions.ParseError(f"JSON parse error - {exc}")


def check_form(data) -> None:
    for field, values in data.lists():
        if problem := _text_problem(field):
            raise _refusal(Unreadable(problem))
        for value in values:
            if isinstance(value, str) and (problem := _text_problem(value)):
                raise _refusal(Unreadable(problem, field))


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        # DRF hands over request.body, which Django has held to DATA_UPLOAD_MAX_MEMORY_SIZE.
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return loads(stream.read(), encoding)
        except Unreadable as exc:
            raise _refusal(exc) from None


class FormParser(parsers.FormParser):
    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        check_form(data)
        return data


class MultiPartParser(parsers.MultiPartParser):
    """Checks the text fields; files are bytes, and Django cleans their names."""

    def parse(self, stream, media_type=None, parser_context=None):
        parsed = super().parse(stream, media_type, parser_context)
        check_form(parsed.data)
        return parsed
