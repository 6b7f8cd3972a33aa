"""The one JSON log line of a failure, for every domain and background job."""

from __future__ import annotations

import json
import logging

__all__ = ["MAX_MESSAGE", "log_failure"]

MAX_MESSAGE = 500


def log_failure(
    log: logging.Logger,
    event: str,
    exc: BaseException,
    *,
    level: int = logging.ERROR,
    message: int | None = MAX_MESSAGE,
    **context: object,
) -> None:
    """Log ``{"event", **context, "exception", "message"}`` as one JSON line at ``level``:
    the exception's type and its message cut to ``message`` characters (``None``: the type
    alone, where the message may quote a payload). No traceback."""
    line: dict[str, object] = {"event": event, **context, "exception": type(exc).__name__}
    if message is not None:
        line["message"] = str(exc)[:message]
    log.log(level, json.dumps(line, default=str))
