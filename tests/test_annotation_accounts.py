"""Annotator accounts: made through the CLI with the passcode on standard input, kept only as argon2 hashes,
rate-limited sign-in that holds across Store instances (sessions, processes), disabling."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from medeval_core.annotation import accounts
from medeval_core.cli import main
from medeval_core.context import current_store
from medeval_core.records import utc_now
from medeval_core.store import Store
from tests.annotation_fixtures import cli

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_cli_reads_the_passcode_from_stdin_and_stores_only_an_argon2_hash(
    monkeypatch: pytest.MonkeyPatch, isolated_store: str
) -> None:
    out = cli("annotators", "add", "dr.ada", "--admin", stdin="correct horse battery\n", monkeypatch=monkeypatch)
    assert "Added administrator dr.ada" in out
    current_store().engine.dispose()
    database = Path(isolated_store.removeprefix("sqlite:///"))
    with sqlite3.connect(database) as connection:
        [(stored,)] = connection.execute("SELECT passcode_hash FROM annotators").fetchall()
    assert stored.startswith("$argon2id$") and PasswordHasher().verify(stored, "correct horse battery")
    for path in database.parent.glob(database.name + "*"):  # the file and its WAL: no plain passcode anywhere
        assert b"correct horse battery" not in path.read_bytes()
    assert accounts.sign_in(current_store(), "dr.ada", "correct horse battery").is_admin


def test_the_passcode_is_never_a_flag_and_empty_stdin_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["annotators", "add", "dr.bo", "--passcode", "secret-secret"])
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["annotators", "add", "dr.bo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "standard input" in err[0]
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["annotators", "add", "dr.bo"]) == 2
    assert "at least 8 characters" in capsys.readouterr().err
    assert accounts.list_annotators(current_store()) == []  # nothing half-written


def test_cli_in_a_subprocess_with_a_piped_passcode(isolated_store: str) -> None:
    result = subprocess.run([sys.executable, "-m", "medeval_core", "annotators", "add", "dr.cy"],
                            input="piped-passcode\n", capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    listing = subprocess.run([sys.executable, "-m", "medeval_core", "annotators", "list", "--json"],
                             capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=True)
    assert '"name": "dr.cy"' in listing.stdout and "piped-passcode" not in listing.stdout


def test_list_disable_and_duplicates(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cli("annotators", "add", "dr.ada", stdin="passcode-one\n", monkeypatch=monkeypatch)
    cli("annotators", "add", "eve@example.org", "--oidc", "--admin")
    assert cli("annotators", "list").splitlines() == ["dr.ada", "eve@example.org  admin oidc"]
    monkeypatch.setattr("sys.stdin", io.StringIO("passcode-two\n"))
    assert main(["annotators", "add", "dr.ada"]) == 2
    assert "already exists" in capsys.readouterr().err
    cli("annotators", "disable", "dr.ada")
    assert cli("annotators", "list").splitlines()[0] == "dr.ada  disabled"
    with pytest.raises(accounts.SignInError):
        accounts.sign_in(current_store(), "dr.ada", "passcode-one")
    assert accounts.oidc_annotator(current_store(), "eve@example.org").is_admin
    with pytest.raises(accounts.SignInError, match="annotators add"):
        accounts.oidc_annotator(current_store(), "stranger@example.org")
    assert main(["annotators", "disable", "nobody"]) == 2


def test_sign_in_is_rate_limited_across_store_instances(isolated_store: str) -> None:
    store = current_store()
    accounts.add_annotator(store, "dr.ada", "the-right-one")
    start = utc_now()
    for minute in range(accounts.MAX_FAILED_ATTEMPTS):
        with pytest.raises(accounts.SignInError, match="do not match"):
            accounts.sign_in(store, "dr.ada", f"wrong-{minute}", now=start + timedelta(minutes=minute))
    # A second Store on the same database (another browser session, process or server) sees the same attempts.
    other = Store(isolated_store)
    later = start + timedelta(minutes=6)
    with pytest.raises(accounts.SignInError, match="Too many failed sign-ins"):
        accounts.sign_in(other, "dr.ada", "the-right-one", now=later)
    assert accounts.locked_until(other, "dr.ada", later) == start + accounts.LOCKOUT_WINDOW
    # Once the first failure is older than the window, one attempt is free again, and success clears the count.
    free = start + accounts.LOCKOUT_WINDOW + timedelta(seconds=1)
    assert accounts.sign_in(other, "dr.ada", "the-right-one", now=free).name == "dr.ada"
    assert accounts.locked_until(other, "dr.ada", free) is None
    # Unknown names are limited the same way (no probing for account names).
    for attempt in range(accounts.MAX_FAILED_ATTEMPTS):
        with pytest.raises(accounts.SignInError, match="do not match"):
            accounts.sign_in(store, "nobody", "x", now=start + timedelta(seconds=attempt))
    with pytest.raises(accounts.SignInError, match="Too many"):
        accounts.sign_in(store, "nobody", "x", now=start + timedelta(seconds=10))
    other.engine.dispose()


def test_a_sign_in_token_expires_is_revoked_and_ends_with_the_account(isolated_store: str) -> None:
    from datetime import timedelta

    from medeval_core.annotation.accounts import (
        add_annotator,
        annotator_for_token,
        disable_annotator,
        open_sign_in,
        revoke_sign_in,
    )
    from medeval_core.context import current_store
    from medeval_core.records import utc_now

    store = current_store()
    ada = add_annotator(store, "dr.ada", "a-long-passcode")
    token = open_sign_in(store, ada, timedelta(hours=1))
    assert annotator_for_token(store, token).name == "dr.ada"  # type: ignore[union-attr]
    assert annotator_for_token(store, token, now=utc_now() + timedelta(hours=2)) is None
    assert annotator_for_token(store, token + "x") is None
    revoke_sign_in(store, token)
    assert annotator_for_token(store, token) is None
    other = open_sign_in(store, ada, timedelta(hours=1))
    disable_annotator(store, "dr.ada")
    assert annotator_for_token(store, other) is None
