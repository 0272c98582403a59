"""Logging filters (config/settings/base.py LOGGING)."""

import logging


class NoTracebackForClientErrors(logging.Filter):
    """Keep django.request's one line for a 4xx and drop its traceback.

    A refused or missing page is the client's error and routine (every 403 printed a full
    traceback into the server log); 5xx records keep theirs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if 400 <= getattr(record, "status_code", 0) < 500:
            record.exc_info = None
            record.exc_text = None
        return True
