"""Annotator accounts: made by an administrator from the CLI, passcodes kept only as argon2 hashes, sign-in attempts
rate-limited through the store (so the limit holds across browser sessions, server restarts and processes).

A deployment that configures OpenID Connect in Streamlit secrets signs annotators in with ``st.login`` instead;
the provider's e-mail address must then be the name of an active account (``annotators add EMAIL --oidc``).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from pydantic import BaseModel
from sqlmodel import col, func, select

from medeval_core.records import utc_now
from medeval_core.store import Store
from medeval_core.store.annotation_tables import AnnotatorRow, SignInAttemptRow, SignInSessionRow

MAX_FAILED_ATTEMPTS = 5
"""Failed sign-ins allowed per account name within ``LOCKOUT_WINDOW`` before further attempts are refused."""
LOCKOUT_WINDOW = timedelta(minutes=15)
MIN_PASSCODE_CHARS = 8

_hasher = PasswordHasher()


class AccountError(Exception):
    """A problem with an account request, worded for the person who made it."""


class SignInError(AccountError):
    pass


class Annotator(BaseModel):
    name: str
    is_admin: bool
    active: bool
    passcode: bool
    """Whether the account has a passcode (False: OpenID Connect only)."""
    created_at: datetime


def _record(row: AnnotatorRow) -> Annotator:
    return Annotator(name=row.name, is_admin=row.is_admin, active=row.active, passcode=row.passcode_hash is not None,
                     created_at=row.created_at)


def _clean_name(name: str) -> str:
    clean = name.strip()
    if not clean or len(clean) > 120 or any(ch.isspace() for ch in clean):
        raise AccountError("An annotator name is 1-120 characters without spaces, e.g. dr.lee or an e-mail address.")
    return clean


def add_annotator(store: Store, name: str, passcode: str | None, is_admin: bool = False) -> Annotator:
    """Create an account; ``passcode=None`` makes an OpenID-Connect-only account."""
    clean = _clean_name(name)
    if passcode is not None and len(passcode) < MIN_PASSCODE_CHARS:
        raise AccountError(f"The passcode must have at least {MIN_PASSCODE_CHARS} characters; choose a longer one.")
    row = AnnotatorRow(name=clean, passcode_hash=_hasher.hash(passcode) if passcode is not None else None,
                       is_admin=is_admin)
    with store.session() as session:
        if session.get(AnnotatorRow, clean) is not None:
            raise AccountError(f"An annotator named {clean!r} already exists; choose another name.")
        session.add(row)
        session.commit()
        session.refresh(row)
    return _record(row)


def list_annotators(store: Store) -> list[Annotator]:
    with store.session() as session:
        return [_record(row) for row in session.exec(select(AnnotatorRow).order_by(col(AnnotatorRow.name)))]


def any_accounts(store: Store) -> bool:
    with store.session() as session:
        return session.exec(select(AnnotatorRow.name).limit(1)).first() is not None


def get_annotator(store: Store, name: str) -> Annotator | None:
    with store.session() as session:
        row = session.get(AnnotatorRow, name)
    return _record(row) if row is not None else None


def disable_annotator(store: Store, name: str) -> Annotator:
    """Stop an account from signing in; its answers are kept."""
    with store.session() as session:
        row = session.get(AnnotatorRow, name)
        if row is None:
            raise AccountError(f"No annotator named {name!r}; list them with `python -m medeval_core annotators list`.")
        row.active = False
        session.add(row)
        session.commit()
        session.refresh(row)
    revoke_sign_ins(store, row.name)
    return _record(row)


def _aware(moment: datetime) -> datetime:
    # SQLite hands datetimes back without their zone; they were written in UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def locked_until(store: Store, name: str, now: datetime | None = None) -> datetime | None:
    """When ``name`` may try again, if its recent failures have used up the allowance; else None."""
    now = now or utc_now()
    since = now - LOCKOUT_WINDOW
    with store.session() as session:
        last_ok = session.exec(select(func.max(SignInAttemptRow.created_at)).where(
            SignInAttemptRow.name == name, col(SignInAttemptRow.ok).is_(True))).one()
        if last_ok is not None and _aware(last_ok) > since:
            since = _aware(last_ok)
        failures = [_aware(moment) for moment in session.exec(
            select(SignInAttemptRow.created_at).where(
                SignInAttemptRow.name == name, col(SignInAttemptRow.ok).is_(False),
                SignInAttemptRow.created_at > since,
            ).order_by(col(SignInAttemptRow.created_at)))]
    if len(failures) < MAX_FAILED_ATTEMPTS:
        return None
    return failures[-MAX_FAILED_ATTEMPTS] + LOCKOUT_WINDOW


def sign_in(store: Store, name: str, passcode: str, now: datetime | None = None) -> Annotator:
    """Check a passcode. Every attempt is recorded; after ``MAX_FAILED_ATTEMPTS`` failures within
    ``LOCKOUT_WINDOW`` the account name is refused (even with the right passcode) until the window has passed."""
    now = now or utc_now()
    clean = name.strip()
    until = locked_until(store, clean, now)
    if until is not None:
        minutes = max(1, int((until - now).total_seconds() // 60) + 1)
        raise SignInError(f"Too many failed sign-ins for this name; try again in {minutes} minutes.")
    with store.session() as session:
        row = session.get(AnnotatorRow, clean)
        ok = False
        if row is not None and row.active and row.passcode_hash is not None:
            try:
                ok = _hasher.verify(row.passcode_hash, passcode)
            except (VerificationError, InvalidHashError):
                ok = False
        else:
            # Spend the same time as a real check, so a missing name cannot be told from a wrong passcode.
            _hasher.hash(passcode)
        session.add(SignInAttemptRow(name=clean, ok=ok, created_at=now))
        session.commit()
    if not ok or row is None:
        raise SignInError("That name and passcode do not match an active account; check both and try again.")
    return _record(row)


def oidc_annotator(store: Store, email: str | None) -> Annotator:
    """The active account for an identity the OpenID Connect provider vouched for."""
    if not email:
        raise SignInError("The identity provider gave no e-mail address; ask an administrator to check its setup.")
    found = get_annotator(store, email)
    if found is None or not found.active:
        raise SignInError(f"{email} has no active annotator account; ask an administrator to add it with "
                          f"`python -m medeval_core annotators add {email} --oidc`.")
    return found


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def open_sign_in(store: Store, annotator: Annotator, lifetime: timedelta, now: datetime | None = None) -> str:
    """A new random token for a browser that has just signed in; the store keeps only its hash, with its expiry."""
    token = secrets.token_urlsafe(32)
    now = now or utc_now()
    with store.session() as session:
        session.add(SignInSessionRow(token_hash=_token_hash(token), annotator=annotator.name, created_at=now,
                                     expires_at=now + lifetime))
        session.commit()
    return token


def annotator_for_token(store: Store, token: str, now: datetime | None = None) -> Annotator | None:
    """The active account a browser's token signs in; None once it has expired, was revoked or the account
    disabled."""
    now = now or utc_now()
    with store.session() as session:
        row = session.get(SignInSessionRow, _token_hash(token))
        if row is None or row.revoked_at is not None or _aware(row.expires_at) <= now:
            return None
        account = session.get(AnnotatorRow, row.annotator)
    return _record(account) if account is not None and account.active else None


def revoke_sign_in(store: Store, token: str) -> None:
    """Sign one browser out (its token no longer signs anybody in)."""
    with store.session() as session:
        row = session.get(SignInSessionRow, _token_hash(token))
        if row is not None and row.revoked_at is None:
            row.revoked_at = utc_now()
            session.add(row)
            session.commit()


def revoke_sign_ins(store: Store, name: str) -> int:
    """Sign ``name`` out of every browser; how many sign-ins were still open."""
    now = utc_now()
    with store.session() as session:
        rows = session.exec(select(SignInSessionRow).where(
            SignInSessionRow.annotator == name, col(SignInSessionRow.revoked_at).is_(None))).all()
        for row in rows:
            row.revoked_at = now
            session.add(row)
        session.commit()
    return len(rows)
