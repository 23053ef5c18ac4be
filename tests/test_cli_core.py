import json
import subprocess
import sys
from pathlib import Path

from medeval_core.cli import main
from medeval_core.records import CaseResult, CaseStatus, RunConfig
from medeval_core.store import Store

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medeval_core", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_check_reported_prints_the_documents_numbers() -> None:
    result = run_cli("check-reported", "--wilson", "72/158")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "PanDerm     90/160 = 56.25 %" in out
    assert "SkinGPT-R1  81/160 = 50.63 %" in out
    assert "9 cases, 5.63 percentage points" in out
    assert "72/158 (45.57 %): 38.00-53.35" in out
    assert "All reported values match." in out


def test_check_reported_json(capsys) -> None:
    assert main(["check-reported", "--json", "--wilson", "72/158"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [(m["name"], m["percent"]) for m in payload["models"]] == [("PanDerm", "56.25"), ("SkinGPT-R1", "50.63")]
    assert payload["difference"]["cases"] == 9 and payload["difference"]["points"] == "5.63"
    assert payload["difference"]["points_unrounded"] == 5.625
    assert payload["wilson"][0]["wilson_low_percent"] == "38.00"
    assert payload["wilson"][0]["wilson_high_percent"] == "53.35"
    assert payload["all_match"] is True


def test_bad_counts_give_one_clear_sentence(capsys) -> None:
    assert main(["check-reported", "--wilson", "80/72"]) == 2
    assert "needs 0 <= successes <= total" in capsys.readouterr().err


def test_runs_list_show_and_export(isolated_store: str, tmp_path: Path, capsys) -> None:
    store = Store(isolated_store)
    store.create_run(RunConfig(benchmark="demo", label="smoke"), run_id="demo-1")
    store.save_result(CaseResult(run_id="demo-1", case_id="c1", status=CaseStatus.OK, metrics={"correct": True}))
    store.save_result(CaseResult(run_id="demo-1", case_id="c2", status=CaseStatus.FAILED, error="timeout"))
    assert main(["runs", "list"]) == 0
    assert "demo-1" in capsys.readouterr().out
    assert main(["runs", "show", "demo-1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["done"], shown["failed"], shown["expected_cases"]) == (1, 1, None)
    out = tmp_path / "results.csv"
    assert main(["runs", "export", "demo-1", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("run_id,case_id,repetition,status") and len(lines) == 3
    assert main(["runs", "export", "demo-1", "--out", str(tmp_path / "x.xlsx")]) == 2
    assert "use a .csv or .jsonl" in capsys.readouterr().err
    assert main(["resume", "nope"]) == 2
    assert "No run with id 'nope'" in capsys.readouterr().err


def test_throttled_progress_prints_first_and_last_events_once(capsys) -> None:
    from medeval_core.cli import ThrottledProgress
    from medeval_core.runs.runner import Progress

    def event(done: int) -> Progress:
        return Progress(run_id="r", total=100, done=done, failed=0, pending=100 - done, elapsed_s=1.0,
                        rate_per_s=10.0, eta_s=1.0)

    printer = ThrottledProgress(interval_s=3600)
    for done in [0, *range(1, 101), 100]:
        printer(event(done))
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split("done ")[1].split()[0] for line in lines] == ["0", "100"]


def test_help_builds_the_parser_from_light_modules_only() -> None:
    """``--help`` (and so every command's parser) imports neither the store (SQLAlchemy, SQLModel), the runner,
    the HTTP client nor numpy/pandas: they cost hundreds of milliseconds at every start."""
    heavy = ("sqlalchemy", "sqlmodel", "httpx", "tenacity", "numpy", "pandas", "medeval_core.store",
             "medeval_core.runs.service", "medeval_core.runs.runner", "medeval_core.context")
    code = ("import sys\nfrom medeval_core.cli import build_parser\nparser = build_parser()\n"
            "for argv in (['--help'], ['run', '--help'], ['data', 'fetch', '--help'], ['runs', 'show', '--help']):\n"
            "    try:\n        parser.parse_args(argv)\n    except SystemExit:\n        pass\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_store_errors_are_the_light_modules_classes() -> None:
    from medeval_core import errors, store

    assert store.StoreError is errors.StoreError
    assert store.DuplicateResultError is errors.DuplicateResultError
    assert issubclass(errors.DuplicateResultError, errors.StoreError)


def test_a_mistyped_option_is_named_with_the_closest_known_one(capsys) -> None:
    import pytest

    from medeval_core.cli import main

    with pytest.raises(SystemExit):
        main(["runs", "list", "--benchmrk", "ddxplus"])
    assert "unknown option --benchmrk; did you mean --benchmark?" in capsys.readouterr().err
    # A mistyped required option is named too, not hidden behind argparse's "arguments are required".
    with pytest.raises(SystemExit) as exited:
        main(["run", "ddxplus", "--patinets", "x.csv", "--agent", "kb-bayes"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "unknown option --patinets; did you mean --patients?" in err
    assert "required" not in err
    with pytest.raises(SystemExit):  # a missing one without a typo still says what is required
        main(["run", "ddxplus", "--agent", "kb-bayes"])
    assert "the following arguments are required: --patients" in capsys.readouterr().err
