"""Data access: status of a data directory, path resolution, and fetching from a local stand-in for the services.

The stand-in is a real HTTP server on 127.0.0.1 that answers as figshare's API (article listing, redirecting
download URLs), raw.githubusercontent.com and the ISIC Archive API v2 do; it can fail, truncate or corrupt answers.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from medeval_core import cli
from medeval_core.benchmarks.ddi.sources import ddi_paths, lesion_images
from medeval_core.benchmarks.ddxplus.sources import RELEASE_FILES as DDXPLUS_RELEASE_FILES
from medeval_core.benchmarks.ddxplus.sources import ddxplus_paths
from medeval_core.benchmarks.dynamicare.sources import agentclinic_paths
from medeval_core.benchmarks.mediq.sources import mediq_paths
from medeval_core.benchmarks.sdbench.sources import cms_prices_path
from medeval_core.data import (
    ChecksumError,
    DataMissingError,
    DownloadError,
    Endpoints,
    FetchProgress,
    RetryPolicy,
    data_status,
    fetch,
)

FAST_RETRY = RetryPolicy(attempts=3, initial_wait_s=0.01, max_wait_s=0.02)


@dataclass
class Route:
    body: bytes = b""
    content_type: str = "application/octet-stream"
    redirect: str | None = None
    fail_with: list[int] = field(default_factory=list)  # statuses answered (in order) before the real answer
    truncate_times: int = 0  # answers that announce the full length but stop half-way


class FakeServices:
    """figshare, raw GitHub and ISIC on one local server, each under its own path prefix."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.gets: Counter[str] = Counter()
        self.heads: Counter[str] = Counter()
        services = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
                pass

            def do_HEAD(self) -> None:
                services.heads[self.path] += 1
                self._answer(send_body=False)

            def do_GET(self) -> None:
                services.gets[self.path] += 1
                self._answer(send_body=True)

            def _answer(self, send_body: bool) -> None:
                route = services.routes.get(self.path)
                if route is None:
                    self.send_error(404)
                    return
                if route.fail_with:
                    self.send_error(route.fail_with.pop(0))
                    return
                if route.redirect:
                    self.send_response(302)
                    self.send_header("Location", route.redirect)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", route.content_type)
                self.send_header("Content-Length", str(len(route.body)))
                self.end_headers()
                if not send_body:
                    return
                if route.truncate_times:
                    route.truncate_times -= 1
                    self.wfile.write(route.body[: len(route.body) // 2])
                    self.close_connection = True
                    return
                self.wfile.write(route.body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.endpoints = Endpoints(figshare_api=f"{self.base}/figshare/v2", github_raw=f"{self.base}/raw",
                                   isic_api=f"{self.base}/isic/api/v2")
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add_json(self, path: str, payload: object) -> None:
        self.routes[path] = Route(body=json.dumps(payload).encode(), content_type="application/json")

    def add_figshare_article(self, files: dict[str, bytes], *, listed: dict[str, dict[str, object]] | None = None,
                             omit: tuple[str, ...] = ()) -> None:
        """The DDXPlus article; each download URL redirects to storage, as ndownloader.figshare.com does."""
        entries = []
        for number, (name, body) in enumerate(files.items(), start=40278000):
            if name in omit:
                continue
            self.routes[f"/ndownloader/files/{number}"] = Route(redirect=f"{self.base}/s3/{name}")
            self.routes[f"/s3/{name}"] = Route(body=body)
            md5 = hashlib.md5(body).hexdigest()
            entry: dict[str, object] = {
                "id": number, "name": name, "size": len(body), "is_link_only": False,
                "download_url": f"{self.base}/ndownloader/files/{number}", "supplied_md5": md5, "computed_md5": md5,
                "mimetype": "application/octet-stream",
            }
            entry.update((listed or {}).get(name, {}))
            entries.append(entry)
        self.add_json("/figshare/v2/articles/22687585", {
            "id": 22687585, "title": "DDXPlus Dataset (English)", "version": 2, "files": entries,
            "license": {"name": "CC BY 4.0"},
        })

    def add_raw(self, repo_path: str, body: bytes) -> None:
        self.routes[f"/raw/{repo_path}"] = Route(body=body, content_type="text/plain; charset=utf-8")

    def add_isic_image(self, isic_id: str, body: bytes, *, listed_size: int | None = None) -> None:
        content_path = f"/isic-content/{hashlib.sha1(isic_id.encode()).hexdigest()}.jpg"
        self.routes[content_path] = Route(body=body, content_type="image/jpeg")
        self.add_json(f"/isic/api/v2/images/{isic_id}/", {
            "isic_id": isic_id, "public": True, "copyright_license": "CC-0",
            "attribution": "Anonymous",
            "files": {
                "full": {"url": f"{self.base}{content_path}?X-Amz-Signature=abc",
                         "size": len(body) if listed_size is None else listed_size},
                "thumbnail_256": {"url": f"{self.base}/isic-thumb/{isic_id}.jpg", "size": 10},
            },
            "metadata": {"acquisition": {"pixels_x": 1022, "pixels_y": 767}, "clinical": {}},
        })
        # The signed URL's query string is part of the request path the server sees.
        self.routes[f"{content_path}?X-Amz-Signature=abc"] = self.routes.pop(content_path)


@pytest.fixture
def services() -> Iterator[FakeServices]:
    fake = FakeServices()
    yield fake
    fake.close()


def patients_zip(split: str) -> bytes:
    """A release zip as figshare holds it: one member without a .csv suffix, in the official CSV format."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"release_{split}_patients",
                         "AGE,DIFFERENTIAL_DIAGNOSIS,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE\n"
                         "49,\"[['Bronchitis', 0.19], ['Pneumonia', 0.17]]\",M,Bronchitis,\"['E_48', 'E_91']\",E_91\n")
    return buffer.getvalue()


def ddxplus_release() -> dict[str, bytes]:
    files = {
        "release_evidences.json": json.dumps({"E_91": {"name": "E_91", "data_type": "B"}}).encode(),
        "release_conditions.json": json.dumps({"Bronchitis": {"condition_name": "Bronchitis"}}).encode(),
        **{f"release_{split}_patients.zip": patients_zip(split) for split in ("train", "validate", "test")},
    }
    assert tuple(files) == DDXPLUS_RELEASE_FILES
    return files


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------------------------------- status


def test_status_of_the_shared_data(data_dir: Path) -> None:
    states = {s.source.name: s for s in data_status(data_dir)}
    assert {name: s.state for name, s in states.items()} == {
        "ddxplus": "found", "mediq": "found", "agentclinic": "found", "lesions": "found", "ddi": "missing",
        "costing": "found", "sdbench": "missing",
    }
    assert "patients_sample_en.csv" in states["ddxplus"].files
    assert len(states["lesions"].files) == 5
    assert "Stanford AIMI" in states["ddi"].how_to_get and str(data_dir / "ddi") in states["ddi"].how_to_get
    assert "not public" in states["sdbench"].how_to_get
    assert states["mediq"].how_to_get == "run `python -m medeval_core data fetch mediq`"

    ddx = ddxplus_paths(data_dir)
    assert ddx.evidences.name == "release_evidences.json" and ddx.patients == {}
    assert ddx.patients_file("test") == data_dir / "ddxplus" / "patients_sample_en.csv"
    with pytest.raises(DataMissingError, match=r"release_train_patients\.zip.*data fetch ddxplus"):
        ddx.patients_file("train")
    imedqa = mediq_paths(data_dir, "imedqa")
    assert (imedqa.path.name, imedqa.release) == ("imedqa_sample200.jsonl", "sample")
    assert mediq_paths(data_dir, "icraftmd").path.name == "icraftmd.jsonl"
    clinic = agentclinic_paths(data_dir)
    assert clinic.medqa.name == "agentclinic_medqa.jsonl" and clinic.medqa_extended is None
    assert [p.name for p in lesion_images(data_dir)] == [f"ISIC_000000{i}.jpg" for i in range(5)]
    assert cms_prices_path(data_dir).name == "cms_prices.csv"


def test_status_of_an_empty_directory_says_how_to_get_each_source(tmp_path: Path) -> None:
    statuses = data_status(tmp_path / "nothing-here")
    assert {s.state for s in statuses} == {"missing"}
    assert all(s.files == () and s.missing for s in statuses)
    commands = {s.source.name: s.source.fetch_command for s in statuses}
    assert commands["lesions"] == "python -m medeval_core data fetch isic"
    assert commands["ddi"] is None and commands["costing"] is None and commands["sdbench"] is None

    with pytest.raises(DataMissingError, match=r"release_evidences\.json is missing .*data fetch ddxplus") as err:
        ddxplus_paths(tmp_path)
    assert err.value.source == "ddxplus"
    with pytest.raises(DataMissingError, match=r"all_dev_good\.jsonl \(or imedqa_sample200\.jsonl\).*fetch mediq"):
        mediq_paths(tmp_path, "imedqa")
    with pytest.raises(DataMissingError, match="data fetch agentclinic"):
        agentclinic_paths(tmp_path)
    with pytest.raises(DataMissingError, match="data fetch isic"):
        lesion_images(tmp_path)
    with pytest.raises(DataMissingError, match=r"ddi_metadata\.csv is missing.*Stanford AIMI"):
        ddi_paths(tmp_path)
    with pytest.raises(DataMissingError, match=r"cms_prices\.csv is missing.*charge-master"):
        cms_prices_path(tmp_path)


def test_partial_sources_list_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "ddxplus").mkdir()
    (tmp_path / "ddxplus" / "release_evidences.json").write_text("{}")
    (tmp_path / "ddxplus" / ".release_conditions.json.x1.part").write_text("{}")  # an interrupted download
    (tmp_path / "ddi").mkdir()
    (tmp_path / "ddi" / "ddi_metadata.csv").write_text("DDI_ID,DDI_file,skin_tone,malignant,disease\n")
    states = {s.source.name: s for s in data_status(tmp_path)}
    assert states["ddxplus"].state == "partial"
    assert states["ddxplus"].files == ("release_evidences.json",)
    assert states["ddxplus"].missing[0] == "release_conditions.json"
    assert states["ddxplus"].missing[1].startswith("patients")
    assert states["ddi"].state == "partial" and states["ddi"].missing == ("DDI images (.png)",)
    assert ddi_paths(tmp_path).metadata == tmp_path / "ddi" / "ddi_metadata.csv"
    with pytest.raises(DataMissingError, match=r"release_conditions\.json"):
        ddxplus_paths(tmp_path)


def test_ddxplus_paths_prefer_official_patients_and_unpacked_csv(tmp_path: Path) -> None:
    folder = tmp_path / "ddxplus"
    folder.mkdir()
    for name in ("release_evidences.json", "release_conditions.json", "release_test_patients.zip",
                 "release_test_patients.csv", "release_train_patients.zip", "patients_sample_en.csv"):
        (folder / name).write_text("x")
    paths = ddxplus_paths(tmp_path)
    assert paths.patients_file("test").name == "release_test_patients.csv"
    assert paths.patients_file("train").name == "release_train_patients.zip"
    assert paths.sample_patients == folder / "patients_sample_en.csv"
    with pytest.raises(DataMissingError, match="release_validate_patients"):
        paths.patients_file("validate")


# --------------------------------------------------------------------------------------------------- fetching


def test_fetch_ddxplus_from_figshare_then_skip_intact_files(services: FakeServices, tmp_path: Path) -> None:
    release = ddxplus_release()
    services.add_figshare_article(release)
    events: list[FetchProgress] = []

    report = fetch("ddxplus", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY, on_progress=events.append)

    folder = tmp_path / "ddxplus"
    assert report.origin == "figshare article 22687585 version 2" and report.folder == folder
    assert [f.name for f in report.files] == list(DDXPLUS_RELEASE_FILES)
    for item in report.files:
        assert item.action == "downloaded" and item.checks == ("size", "md5")
        assert (folder / item.name).read_bytes() == release[item.name]
        assert item.sha256 == hashlib.sha256(release[item.name]).hexdigest()
    assert services.gets["/ndownloader/files/40278000"] == 1  # the redirect was followed
    assert [e.file for e in events if e.stage == "downloaded"] == list(DDXPLUS_RELEASE_FILES)
    last = [e for e in events if e.file == "release_test_patients.zip"][-1]
    assert last.done_bytes == last.total_bytes == len(release["release_test_patients.zip"])
    assert leftovers(folder) == []
    paths = ddxplus_paths(tmp_path)
    assert paths.patients_file("validate").name == "release_validate_patients.zip"
    assert next(s for s in data_status(tmp_path) if s.source.name == "ddxplus").state == "found"

    # A rerun keeps intact files and downloads again only the one that no longer matches its md5.
    (folder / "release_conditions.json").write_bytes(b"{" + b" " * (len(release["release_conditions.json"]) - 1))
    again = fetch("ddxplus", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)
    assert {f.name: f.action for f in again.files} == {
        name: "downloaded" if name == "release_conditions.json" else "already present" for name in release
    }
    assert (folder / "release_conditions.json").read_bytes() == release["release_conditions.json"]
    assert services.gets["/s3/release_train_patients.zip"] == 1
    assert services.gets["/s3/release_conditions.json"] == 2


def test_checksum_mismatch_discards_the_download_and_keeps_the_old_file(
    services: FakeServices, tmp_path: Path
) -> None:
    release = ddxplus_release()
    services.add_figshare_article(release, listed={"release_conditions.json": {"computed_md5": "0" * 32}})
    folder = tmp_path / "ddxplus"
    folder.mkdir()
    (folder / "release_conditions.json").write_bytes(b"previous")

    with pytest.raises(ChecksumError, match=r"release_conditions\.json: md5 [0-9a-f]{32} differs from the published"):
        fetch("ddxplus", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)

    assert (folder / "release_conditions.json").read_bytes() == b"previous"
    assert (folder / "release_evidences.json").read_bytes() == release["release_evidences.json"]
    assert not (folder / "release_train_patients.zip").exists()
    assert leftovers(folder) == []


def test_size_mismatch_is_an_error_with_no_file_left(services: FakeServices, tmp_path: Path) -> None:
    release = ddxplus_release()
    services.add_figshare_article(release, listed={"release_evidences.json": {"size": 10_000}})
    with pytest.raises(ChecksumError, match=r"received \d+ bytes but the publisher lists 10,000"):
        fetch("ddxplus", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)
    assert list((tmp_path / "ddxplus").iterdir()) == []


def test_503_and_a_truncated_body_are_retried(services: FakeServices, tmp_path: Path) -> None:
    release = ddxplus_release()
    services.add_figshare_article(release)
    services.routes["/figshare/v2/articles/22687585"].fail_with = [503]
    services.routes["/s3/release_evidences.json"].fail_with = [503]
    services.routes["/s3/release_test_patients.zip"].truncate_times = 1

    report = fetch("ddxplus", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)

    assert all(f.action == "downloaded" for f in report.files)
    assert services.gets["/figshare/v2/articles/22687585"] == 2
    assert services.gets["/s3/release_evidences.json"] == 2
    assert services.gets["/s3/release_test_patients.zip"] == 2
    for name, body in release.items():
        assert (tmp_path / "ddxplus" / name).read_bytes() == body
    assert leftovers(tmp_path / "ddxplus") == []


def test_persistent_failures_give_up_after_the_retry_budget(services: FakeServices, tmp_path: Path) -> None:
    services.add_figshare_article(ddxplus_release())
    services.routes["/s3/release_evidences.json"].fail_with = [503] * 10
    with pytest.raises(DownloadError, match=r"after 3 attempts.*run the same command again"):
        fetch("ddxplus", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)
    assert services.gets["/s3/release_evidences.json"] == 3
    assert list((tmp_path / "ddxplus").iterdir()) == []


def test_unexpected_answers_are_clear_errors(services: FakeServices, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match=r"articles/22687585 answered HTTP 404"):
        fetch("ddxplus", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)
    services.add_figshare_article(ddxplus_release(), omit=("release_test_patients.zip",))
    with pytest.raises(DownloadError, match=r"no longer lists release_test_patients\.zip"):
        fetch("ddxplus", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)
    services.add_json("/figshare/v2/articles/22687585", {"id": 22687585})
    with pytest.raises(DownloadError, match="does not understand"):
        fetch("ddxplus", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)
    assert not (tmp_path / "ddxplus").exists()


def test_fetch_mediq_and_agentclinic_from_github(services: FakeServices, tmp_path: Path) -> None:
    dev = b'{"id": 0, "question": "Which diagnosis?"}\n' * 3
    craft = b'{"id": 1, "question": "Which rash?"}\n'
    services.add_raw("stellalisy/mediQ/main/data/all_dev_good.jsonl", dev)
    services.add_raw("stellalisy/mediQ/main/data/all_craft_md.jsonl", craft)
    clinic = {"agentclinic_medqa.jsonl": b'{"OSCE_Examination": {}}\n',
              "agentclinic_medqa_extended.jsonl": b'{"OSCE_Examination": {}}\n' * 2,
              "LICENSE.txt": b"MIT License\n"}
    for name, body in clinic.items():
        services.add_raw(f"SamuelSchmidgall/AgentClinic/main/{name}", body)

    mediq = fetch("mediq", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)
    fetch("agentclinic", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)

    assert mediq.origin == "GitHub stellalisy/mediQ branch main"
    assert [(f.name, f.checks, f.licence) for f in mediq.files] == [
        ("all_dev_good.jsonl", ("size",), "CC BY 4.0"), ("all_craft_md.jsonl", ("size",), "CC BY 4.0")]
    assert (tmp_path / "mediq" / "all_dev_good.jsonl").read_bytes() == dev
    imedqa = mediq_paths(tmp_path, "imedqa")
    assert (imedqa.path.name, imedqa.release) == ("all_dev_good.jsonl", "official")
    assert mediq_paths(tmp_path, "icraftmd").release == "official"
    for name, body in clinic.items():
        assert (tmp_path / "agentclinic" / name).read_bytes() == body
    assert agentclinic_paths(tmp_path).medqa_extended == tmp_path / "agentclinic" / "agentclinic_medqa_extended.jsonl"

    rerun = fetch("mediq", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)
    assert {f.action for f in rerun.files} == {"already present"}
    assert services.gets["/raw/stellalisy/mediQ/main/data/all_dev_good.jsonl"] == 1
    assert services.heads["/raw/stellalisy/mediQ/main/data/all_dev_good.jsonl"] == 2


def test_fetch_isic_images_by_id(services: FakeServices, tmp_path: Path) -> None:
    images = {f"ISIC_000000{i}": bytes([0xFF, 0xD8, 0xFF, i]) * 50 for i in range(5)}
    for isic_id, body in images.items():
        services.add_isic_image(isic_id, body)

    report = fetch("isic", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY)

    assert report.folder == tmp_path / "lesions"
    assert [(f.name, f.licence, f.checks) for f in report.files] == [
        (f"{i}.jpg", "CC-0", ("size",)) for i in images]
    assert [p.read_bytes() for p in lesion_images(tmp_path)] == list(images.values())

    services.add_isic_image("ISIC_0024306", b"\xff\xd8short", listed_size=99)
    with pytest.raises(ChecksumError, match=r"ISIC_0024306\.jpg: received 7 bytes"):
        fetch("isic", tmp_path, endpoints=services.endpoints, retry=FAST_RETRY, isic_ids=["ISIC_0024306"])
    assert not (tmp_path / "lesions" / "ISIC_0024306.jpg").exists()
    with pytest.raises(ValueError, match="ISIC_ and seven digits"):
        fetch("isic", tmp_path, endpoints=services.endpoints, isic_ids=["0000000"])


def test_endpoints_come_from_the_environment() -> None:
    endpoints = Endpoints.from_env({"MEDEVAL_FIGSHARE_API": "http://127.0.0.1:1/fs", "MEDEVAL_ISIC_API": ""})
    assert endpoints.figshare_api == "http://127.0.0.1:1/fs"
    assert endpoints.github_raw == "https://raw.githubusercontent.com"
    assert endpoints.isic_api == "https://api.isic-archive.com/api/v2"


# --------------------------------------------------------------------------------------------------- CLI


def test_cli_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "agentclinic").mkdir()
    (tmp_path / "agentclinic" / "agentclinic_medqa.jsonl").write_text("{}\n")
    monkeypatch.setenv("MEDEVAL_DATA_DIR", str(tmp_path))

    assert cli.main(["data", "status", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["data_dir"] == str(tmp_path.resolve())
    by_name = {s["source"]["name"]: s for s in payload["sources"]}
    assert by_name["agentclinic"]["state"] == "found"
    assert by_name["ddxplus"]["how_to_get"] == "run `python -m medeval_core data fetch ddxplus`"

    assert cli.main(["data", "status"]) == 0
    text = capsys.readouterr().out
    assert f"Data directory: {tmp_path.resolve()}" in text
    assert "agentclinic  found    AgentClinic MedQA: agentclinic_medqa.jsonl" in text
    assert "to get it: run `python -m medeval_core data fetch mediq`" in text


def test_cli_fetch(services: FakeServices, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    services.add_raw("SamuelSchmidgall/AgentClinic/main/agentclinic_medqa.jsonl", b"{}\n" * 400)
    services.add_raw("SamuelSchmidgall/AgentClinic/main/agentclinic_medqa_extended.jsonl", b"{}\n")
    services.add_raw("SamuelSchmidgall/AgentClinic/main/LICENSE.txt", b"MIT License\n")
    monkeypatch.setenv("MEDEVAL_GITHUB_RAW", services.endpoints.github_raw)
    monkeypatch.setenv("MEDEVAL_DATA_DIR", str(tmp_path / "unused"))

    assert cli.main(["data", "fetch", "agentclinic", "--dest", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert f"agentclinic: 3 files from GitHub SamuelSchmidgall/AgentClinic branch main in {tmp_path / 'agentclinic'}" \
        in captured.out
    assert "(3 downloaded, 0 already present)" in captured.out
    assert "agentclinic_medqa.jsonl  1,200 bytes" in captured.out and "checked: size, licence MIT" in captured.out
    assert "agentclinic_medqa.jsonl: downloaded (1,200 bytes)" in captured.err
    assert not (tmp_path / "unused").exists()

    assert cli.main(["data", "fetch", "agentclinic", "--dest", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [f["action"] for f in report["files"]] == ["already present"] * 3

    monkeypatch.setenv("MEDEVAL_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEDEVAL_ISIC_API", services.endpoints.isic_api)
    assert cli.main(["data", "fetch", "isic", "--isic-ids", "ISIC_0000009"]) == 1
    err = capsys.readouterr().err
    assert "error: " in err and "images/ISIC_0000009/ answered HTTP 404" in err
    assert cli.main(["data", "fetch", "isic", "--isic-ids", "ISIC_1"]) == 2
