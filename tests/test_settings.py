import json
import re
from pathlib import Path

import pytest

from medeval_core.settings import JudgeRequestSettings, SettingsError, fingerprint, load_settings, runtime_versions
from medeval_core.status import backends_status

REPO = Path(__file__).resolve().parent.parent


def test_environment_overrides_files_and_a_base_url_selects_the_openai_backend() -> None:
    settings = load_settings({
        "MEDEVAL_DATA_DIR": "/tmp/somewhere",
        "MEDEVAL_DB_URL": "sqlite:////tmp/x.db",
        "MEDEVAL_JUDGE_BASE_URL": "http://127.0.0.1:9/v1",
        "MEDEVAL_VLM_BACKEND": "transformers",
        "MEDEVAL_VLM_MODEL": "/models/skingpt",
    })
    assert settings.data_dir == Path("/tmp/somewhere")
    assert settings.db_url == "sqlite:////tmp/x.db"
    assert settings.role("judge").backend == "openai"
    assert settings.role("judge").base_url == "http://127.0.0.1:9/v1"
    assert settings.role("vlm").backend == "transformers" and settings.role("vlm").model == "/models/skingpt"


def test_defaults_use_the_offline_judge_and_no_vision_model() -> None:
    settings = load_settings({})
    assert settings.role("judge").backend == "offline"
    assert settings.role("vlm").backend == "none" and not settings.role("vlm").configured
    assert settings.db_url.startswith("sqlite:///") and settings.db_url.endswith("var/medeval.db")


def test_hash_is_stable_and_changes_with_any_effective_value() -> None:
    a = load_settings({"MEDEVAL_DATA_DIR": "/data"})
    b = load_settings({"MEDEVAL_DATA_DIR": "/data"})
    c = load_settings({"MEDEVAL_DATA_DIR": "/data", "MEDEVAL_JUDGE_MODEL": "other"})
    assert a.settings_hash() == b.settings_hash() != c.settings_hash()
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    json.dumps(a.effective())  # serialisable as recorded with each run


def test_secret_values_never_enter_the_effective_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-very-secret")
    effective = json.dumps(load_settings({"MEDEVAL_JUDGE_BASE_URL": "http://127.0.0.1:9/v1"}).effective())
    assert "sk-very-secret" not in effective
    assert "DASHSCOPE_API_KEY" in effective  # the variable's name is recorded, so a run says where its key came from


def test_any_role_can_be_configured_from_the_environment_alone() -> None:
    settings = load_settings({
        "MEDEVAL_GATEKEEPER_BASE_URL": "http://127.0.0.1:9/v1",
        "MEDEVAL_GATEKEEPER_MODEL": "gpt-gatekeeper",
        "MEDEVAL_SDBENCH_JUDGE_BACKEND": "offline",
        "MEDEVAL_CHAT_DEVICES": "1",
    })
    gatekeeper = settings.role("gatekeeper")
    assert (gatekeeper.backend, gatekeeper.model, gatekeeper.base_url) == ("openai", "gpt-gatekeeper",
                                                                           "http://127.0.0.1:9/v1")
    assert gatekeeper.api_key_env == "MEDEVAL_GATEKEEPER_API_KEY" and gatekeeper.configured
    # A hyphenated role is read from its upper-cased, underscored variables, whichever spelling looks it up.
    assert settings.role("sdbench-judge").backend == settings.role("sdbench_judge").backend == "offline"
    assert "sdbench-judge" in settings.roles and settings.role("chat").devices == "1"
    nobody = settings.role("patient")
    assert nobody.backend == "none" and not nobody.configured and nobody.api_key_env == "MEDEVAL_PATIENT_API_KEY"
    rows = {row.role: row for row in backends_status(settings)}
    # Each role is shown by the title its benchmark spec gives it.
    assert rows["SDBench gatekeeper"].configured and rows["SDBench gatekeeper"].model == "gpt-gatekeeper"
    assert rows["SDBench gatekeeper"].api_key_env == "MEDEVAL_GATEKEEPER_API_KEY"
    unconfigured = {row.role: row for row in backends_status(load_settings({}))}
    # A role a benchmark spec declares (SDBench's gatekeeper) is listed unconfigured; one nobody declares is not.
    assert not unconfigured["SDBench gatekeeper"].configured and "tutor" not in unconfigured
    assert {"Vision-language model", "DDI judge", "Chat agent model", "MEDIQ expert", "Simulated patient",
            "Open-diagnosis doctor", "ICD-9 coder", "SDBench judge", "Test pricing model"} <= set(unconfigured)
    assert settings.settings_hash() != load_settings({}).settings_hash()


def test_roles_are_read_from_the_file_by_any_name(tmp_path: Path) -> None:
    for name in ("evaluation.json", "ddi_judge.json"):
        (tmp_path / name).write_text((REPO / "configs" / name).read_text())
    roles = {"patient": {"backend": "openai", "model": "p", "base_url": "http://127.0.0.1:9/v1",
                         "api_key_env": "PATIENT_KEY"}}
    (tmp_path / "backends.json").write_text(json.dumps(roles))
    settings = load_settings({"MEDEVAL_CONFIG_DIR": str(tmp_path), "MEDEVAL_PATIENT_MODEL": "q"})
    assert settings.role("patient").model == "q" and settings.role("patient").api_key_env == "PATIENT_KEY"
    assert settings.role("vlm").backend == "none"
    # Another judge's request settings come from configs/<name>_judge.json, keyed by its name.
    other = {**json.loads((REPO / "configs" / "ddi_judge.json").read_text()), "model": "sdbench-judge-llm"}
    (tmp_path / "sdbench_judge.json").write_text(json.dumps(other))
    judges = load_settings({"MEDEVAL_CONFIG_DIR": str(tmp_path)}).judges
    assert sorted(judges) == ["ddi", "sdbench"] and judges["sdbench"].model == "sdbench-judge-llm"
    assert judges["ddi"].model == "qwen3.8-max"
    (tmp_path / "backends.json").write_text(json.dumps({**roles, "PATIENT": roles["patient"]}))
    with pytest.raises(SettingsError, match="same role"):
        load_settings({"MEDEVAL_CONFIG_DIR": str(tmp_path)})


def test_the_ddi_judge_settings_are_the_release_file_value_for_value() -> None:
    settings = load_settings({"MEDEVAL_JUDGE_MODEL": "other", "MEDEVAL_JUDGE_BASE_URL": "http://127.0.0.1:9/v1"})
    released = json.loads((REPO / "configs" / "ddi_judge.json").read_text())
    ddi = settings.judge_settings("ddi")
    assert ddi is settings.judges["ddi"] and list(settings.judges) == ["ddi"]
    assert ddi == JudgeRequestSettings.model_validate(released)
    # Every value as the file states it: overriding the judge role leaves the request settings alone.
    assert json.loads(ddi.model_dump_json()) == released
    assert settings.effective()["judges"]["ddi"] == released
    with pytest.raises(SettingsError, match="sdbench"):
        settings.judge_settings("sdbench")


def test_invalid_config_file_gives_a_readable_error(tmp_path: Path) -> None:
    for name in ("evaluation.json", "ddi_judge.json", "backends.json"):
        (tmp_path / name).write_text((REPO / "configs" / name).read_text())
    (tmp_path / "evaluation.json").write_text('{"batch_size": -1}')
    with pytest.raises(SettingsError, match=r"evaluation\.json has invalid values"):
        load_settings({"MEDEVAL_CONFIG_DIR": str(tmp_path)})
    (tmp_path / "evaluation.json").write_text("{not json")
    with pytest.raises(SettingsError, match="not valid JSON"):
        load_settings({"MEDEVAL_CONFIG_DIR": str(tmp_path)})
    with pytest.raises(SettingsError, match=r"invalid value \(MEDEVAL_JUDGE_BACKEND\)"):
        load_settings({"MEDEVAL_JUDGE_BACKEND": "telepathy"})
    with pytest.raises(SettingsError, match="MEDEVAL_GATEKEEPER_BACKEND"):
        load_settings({"MEDEVAL_GATEKEEPER_BACKEND": "telepathy"})


def test_runtime_versions_name_the_libraries_that_shape_results() -> None:
    versions = runtime_versions()
    assert versions["torch"].startswith("2.13.0")
    assert versions["transformers"] and versions["python"] and versions["medeval"]


def test_the_data_folder_is_found_by_one_rule_for_the_cli_and_the_app(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from medeval_core import settings as settings_module

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.setattr(settings_module, "PROJECT_ROOT", checkout)
    monkeypatch.setattr(settings_module, "DEFAULT_VAR_DIR", checkout / "var")
    assert load_settings(environ={}).data_dir == (checkout / "var" / "data").resolve()
    (tmp_path / "shared" / "data").mkdir(parents=True)  # the layout `make run` used to look for on its own
    assert load_settings(environ={}).data_dir == (tmp_path / "shared" / "data").resolve()
    chosen = tmp_path / "elsewhere"
    assert load_settings(environ={"MEDEVAL_DATA_DIR": str(chosen)}).data_dir == chosen.resolve()


def test_the_readme_runs_the_cli_with_the_virtualenv_interpreter() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    blocks = readme.split("```bash")[1:]
    commands = [line for block in blocks for line in block.split("```")[0].splitlines() if "-m medeval_core" in line]
    # Each invocation, also one that a passcode is piped into, names the virtualenv's interpreter.
    assert commands and all(re.search(r"(^|\| )\.venv/bin/python -m medeval_core ", line) and
                            line.count("-m medeval_core") == line.count(".venv/bin/python -m medeval_core")
                            for line in commands), commands
    assert "source .venv/bin/activate" in readme


def test_a_chat_roles_reply_cap_comes_from_its_variable_and_is_recorded() -> None:
    from medeval_core.models import for_role

    endpoints = {"MEDEVAL_SDBENCH_JUDGE_BASE_URL": "http://127.0.0.1:9/v1", "MEDEVAL_SDBENCH_JUDGE_MODEL": "m",
                 "MEDEVAL_CHAT_BASE_URL": "http://127.0.0.1:9/v1", "MEDEVAL_CHAT_MODEL": "m"}
    settings = load_settings({**endpoints, "MEDEVAL_SDBENCH_JUDGE_MAX_TOKENS": "64"})
    assert for_role("sdbench-judge", settings).describe()["max_tokens"] == 64  # recorded with a run
    assert for_role("chat", settings).describe()["max_tokens"] == 1024  # unset: the client's default
    assert settings.settings_hash() != load_settings(endpoints).settings_hash()
    with pytest.raises(SettingsError, match="MAX_TOKENS"):
        load_settings({"MEDEVAL_CHAT_MAX_TOKENS": "0"})
