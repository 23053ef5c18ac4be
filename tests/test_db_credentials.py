"""Database credentials never show, in any form libpq and SQLAlchemy accept (issue 19, item 3): on the command
line's error line, the sidebar's store status, log records and stored errors."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from medeval_core import context
from medeval_core.cli import main
from medeval_core.records import CaseResult, CaseStatus
from medeval_core.redaction import mask_credentials, redact
from medeval_core.settings import load_settings
from medeval_core.status import store_status
from tests.conftest import free_port

SECRET = "Pw-0f-the-DB"  # short enough that only its shape, not a registered value, can remove it


def unreachable_forms(port: int, passfile: Path) -> dict[str, str]:
    """Every credential form, each pointing at a port where nothing listens (the error line names the URL)."""
    base = f"127.0.0.1:{port}/medeval"
    return {
        "userinfo": f"postgresql+psycopg://medeval:{SECRET}@{base}",
        "query password": f"postgresql+psycopg://medeval@{base}?password={SECRET}",
        "query sslpassword": f"postgresql+psycopg://medeval@{base}?sslmode=prefer&sslpassword={SECRET}",
        "query passfile": f"postgresql+psycopg://medeval@{base}?passfile={passfile}",
        "libpq key=value": f"host=127.0.0.1 port={port} user=medeval password='{SECRET} x' dbname=medeval",
        "userinfo with @": f"postgresql+psycopg://medeval:{SECRET}@x@{base}",
    }


@pytest.fixture
def passfile(tmp_path: Path) -> Path:
    path = tmp_path / "pgpass"
    path.write_text(f"*:*:*:medeval:{SECRET}\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def test_every_credential_form_is_masked_on_the_error_line_and_the_store_status(
    passfile: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for form, url in unreachable_forms(free_port(), passfile).items():
        monkeypatch.setenv("MEDEVAL_DB_URL", url)
        context.reset()
        capsys.readouterr()
        assert main(["runs", "list"]) == 2, form
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, (form, err)
        assert SECRET not in err and "127.0.0.1" in err, (form, err)
        status = store_status(load_settings())
        assert not status.reachable and SECRET not in status.url + (status.error or ""), form
        if form == "query passfile":
            assert str(passfile) in err  # the path may show; the file's contents never do


@pytest.mark.parametrize("text", [
    f"postgresql://u:{SECRET}@db.example:5432/x",
    f"postgresql://u@db.example/x?password={SECRET}&sslmode=require",
    f"postgresql://u@db.example/x?sslpassword={SECRET}",
    f"host=db.example password={SECRET} user=u",
    f"host=db.example password = '{SECRET} with \\' quote' user=u",
    f"dbname=x PASSWORD={SECRET}",
])
def test_masking_keeps_the_rest_readable(text: str) -> None:
    masked = mask_credentials(text)
    assert SECRET not in masked and "***" in masked
    assert "db.example" in masked or "dbname=x" in masked
    assert "user=u" in masked or "u@" in masked or "u:***@" in masked or "dbname=x" in masked


def test_stored_errors_and_log_records_are_masked() -> None:
    url = f"postgresql+psycopg://medeval@db.example/medeval?password={SECRET}"
    result = CaseResult(run_id="r", case_id="c", status=CaseStatus.FAILED, error=f"could not reach {url}")
    assert SECRET not in (result.error or "") and "db.example" in (result.error or "")
    log = io.StringIO()
    logger = logging.getLogger("medeval.test.db_credentials")
    handler = logging.StreamHandler(log)
    logger.addHandler(handler)
    try:
        logger.error("lost %s", f"host=db.example password={SECRET}")
    finally:
        logger.removeHandler(handler)
    assert SECRET not in log.getvalue() and "db.example" in log.getvalue()
    assert redact("a plain sentence about passwords") == "a plain sentence about passwords"
