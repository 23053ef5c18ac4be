"""Secrets out of every error, log line and export: ``redact`` is the one function that removes them.

A provider's 401 can echo the key it was sent ("Incorrect API key provided: Bearer sk-..."), and that text travels
into stored errors, log lines and exported files. ``redact`` removes every key medeval has read
(``settings.api_key`` and the judges register them), the values of environment variables named like keys, and
anything shaped like a bearer token or an ``sk-`` key. It is applied where such text is made (error messages
of the model and judge clients), where it is stored (the error fields of the typed records) and where it is
logged (a record factory installed once, on import of ``medeval_core``, so that every logger is covered).

Database credentials are removed by shape, in every form libpq and SQLAlchemy accept them: a URL's userinfo
(``postgresql://user:PASSWORD@host``), a ``password`` or ``sslpassword`` query parameter (``...?password=X``) and
the same keys in a libpq ``key=value`` connection string (``host=h password='X'``). A ``passfile`` names a file;
its path may show, its contents are never read here.
"""

from __future__ import annotations

import logging
import os
import re
import threading

REDACTED = "[redacted]"
# Shorter values are too likely to occur in ordinary text ("test", "none") to be replaced everywhere.
MIN_SECRET_CHARS = 8
_SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
_SHAPES = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"),
)

# A libpq keyword whose value is a credential, as a URL query parameter or a key=value connection string:
# the value runs to the next separator, or is a single-quoted libpq string with backslash escapes.
_CREDENTIAL_KEYWORD = re.compile(
    r"(?i)(?<![A-Za-z0-9_])(?P<key>(?:ssl)?password)(?P<equals>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|[^\s&;,'\"]+)")
# The password of a URL's userinfo (``scheme://user:PASSWORD@host``); an unencoded ``@`` inside it belongs to it
# while another ``@`` follows in the same netloc.
_USERINFO_PASSWORD = re.compile(
    r"(?i)(?P<head>\b[a-z][a-z0-9+.-]*://[^\s/?#@:]*):(?P<value>(?:[^\s@/?#]|@(?=[^\s/?#]*@))*)@")

_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember a secret medeval has read, so that ``redact`` removes it wherever it shows up."""
    if value and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _registered.add(value)


def _known_secrets() -> list[str]:
    from_environment = [value for name, value in os.environ.items()
                        if _SECRET_NAME.search(name) and len(value) >= MIN_SECRET_CHARS]
    with _lock:
        known = set(_registered).union(from_environment)
    # Longest first, so that a key containing another is removed whole.
    return sorted(known, key=len, reverse=True)


def mask_credentials(text: str) -> str:
    """``text`` with every database credential replaced by ``***`` (URL userinfo passwords, ``password`` and
    ``sslpassword`` in query strings and libpq key=value strings); everything else, the user and host included,
    stays readable."""
    text = _USERINFO_PASSWORD.sub(lambda match: f"{match.group('head')}:***@", text)
    return _CREDENTIAL_KEYWORD.sub(lambda match: f"{match.group('key')}{match.group('equals')}***", text)


def redact(text: str) -> str:
    """``text`` with every known secret, every database credential and every bearer-token or ``sk-`` shaped
    string replaced."""
    if not text:
        return text
    text = mask_credentials(text)
    for secret in _known_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    for shape in _SHAPES:
        text = shape.sub(lambda match: f"{match.group(1)} {REDACTED}" if match.lastindex else REDACTED, text)
    return text


def redact_optional(text: str | None) -> str | None:
    return None if text is None else redact(text)


def install_log_redaction() -> None:
    """Redact every log record as it is made (message, arguments and traceback), whichever logger or handler
    it goes to; installing twice is harmless."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "redacts", False):
        return

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # arguments that do not fit the format: the handler reports that
            return record
        record.msg, record.args = redact(message), None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    factory.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
