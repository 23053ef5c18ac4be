import json
from pathlib import Path

import pytest

from medeval_core.settings import SettingsError, fingerprint, load_settings, runtime_versions

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
    assert settings.backends.judge.backend == "openai"
    assert settings.backends.judge.base_url == "http://127.0.0.1:9/v1"
    assert settings.backends.vlm.backend == "transformers" and settings.backends.vlm.model == "/models/skingpt"


def test_defaults_use_the_offline_judge_and_no_vision_model() -> None:
    settings = load_settings({})
    assert settings.backends.judge.backend == "offline"
    assert settings.backends.vlm.backend == "none" and not settings.backends.vlm.configured
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


def test_invalid_config_file_gives_a_readable_error(tmp_path: Path) -> None:
    for name in ("evaluation.json", "ddi_judge.json", "backends.json"):
        (tmp_path / name).write_text((REPO / "configs" / name).read_text())
    (tmp_path / "evaluation.json").write_text('{"batch_size": -1}')
    with pytest.raises(SettingsError, match=r"evaluation\.json has invalid values"):
        load_settings({"MEDEVAL_CONFIG_DIR": str(tmp_path)})
    (tmp_path / "evaluation.json").write_text("{not json")
    with pytest.raises(SettingsError, match="not valid JSON"):
        load_settings({"MEDEVAL_CONFIG_DIR": str(tmp_path)})
    with pytest.raises(SettingsError, match="invalid value"):
        load_settings({"MEDEVAL_JUDGE_BACKEND": "telepathy"})


def test_runtime_versions_name_the_libraries_that_shape_results() -> None:
    versions = runtime_versions()
    assert versions["torch"].startswith("2.13.0")
    assert versions["transformers"] and versions["python"] and versions["medeval"]
