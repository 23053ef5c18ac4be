"""The annotation pages under Streamlit's AppTest: sign-in before anything on every page, the annotator's queue with
one click per judgement and no run or model name anywhere in what is rendered, admin-only task creation and results.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medeval_core.annotation import answers, tasks
from medeval_core.catalog import ANNOTATION_PAGES, pages
from medeval_core.context import current_store
from tests.annotation_fixtures import (
    MODEL_A,
    MODEL_B,
    PASSCODES,
    SECRET_NAMES,
    SeededRuns,
    cli,
    create_task,
)

# The seeded runs and accounts (fixtures ``seeded`` and ``seeded_template``).
pytest_plugins = ("tests.annotation_seeded",)

ROOT = Path(__file__).resolve().parent.parent
ANNOTATE, TASKS_PAGE, RESULTS = (str(ROOT / info.path) for info in ANNOTATION_PAGES)


def rendered(app: AppTest) -> str:
    """Every element's protobuf as text: labels, values, options, help tooltips, everything sent to a browser."""
    parts: list[str] = []

    def walk(node: object) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            parts.append(str(proto))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(app._tree)
    return "\n".join(parts)


def signed_in(page: str, name: str, passcode: str | None = None) -> AppTest:
    app = AppTest.from_file(page, default_timeout=60).run()
    app.text_input[0].input(name)
    app.text_input[1].input(passcode if passcode is not None else PASSCODES[name])
    app.button[0].click().run()
    assert not app.exception, app.exception
    return app


def choice(app: AppTest, criterion: str, value: str):
    return next(b for b in app.button if b.key and b.key.endswith(f"-{criterion}-{value}"))


def test_pages_are_catalogued_in_an_annotation_section() -> None:
    catalogued = {info.url_path: info for info in pages()}
    assert {"annotate", "annotation-tasks", "annotation-results"} <= set(catalogued)
    assert {catalogued[name].section for name in ("annotate", "annotation-tasks", "annotation-results")} == {
        "Annotation"}


@pytest.mark.parametrize("page", [ANNOTATE, TASKS_PAGE, RESULTS])
def test_every_annotation_page_shows_only_the_sign_in(page: str, seeded: SeededRuns) -> None:
    create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators", "dr.ada")
    app = AppTest.from_file(page, default_timeout=60).run()
    assert not app.exception
    assert [t.value for t in app.title] == ["Sign in to annotate"]
    assert [w.label for w in app.text_input] == ["Name", "Passcode"]
    assert [b.label for b in app.button] == ["Sign in"]
    assert not app.dataframe and not app.selectbox and not app.progress
    text = rendered(app)
    assert not [name for name in SECRET_NAMES if name in text]
    app.text_input[0].input("dr.ada")
    app.text_input[1].input("not-the-passcode")
    app.button[0].click().run()
    assert [e.value for e in app.error] == [
        "That name and passcode do not match an active account; check both and try again."]
    assert [t.value for t in app.title] == ["Sign in to annotate"]


def test_annotator_queue_one_click_per_judgement_blinded_and_resumable(seeded: SeededRuns) -> None:
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators",
                       "dr.ada,dr.bo", "--seed", "21")
    app = signed_in(ANNOTATE, "dr.ada")
    assert [t.value for t in app.title] == ["Annotate"]
    assert app.progress[0].proto.text.startswith("0 of 6 done · item 1 of 6")
    assert [s.value for s in app.subheader] == ["Response 1", "Response 2"]
    store = current_store()
    first = answers.my_items(store, "dr.ada", task["id"])[0]
    assert first.payload["left"]["text"] in [t.value for t in app.text]
    for index, criterion in enumerate(task["criteria"]):
        choice(app, criterion, ["left", "tie", "right"][index]).click().run()
        assert not app.exception
    # The last criterion answered moves on to item 2; the answers are stored as clicked.
    assert app.progress[0].proto.text.startswith("1 of 6 done · item 2 of 6")
    saved = answers.my_items(store, "dr.ada", task["id"])[0].answers
    assert saved == dict(zip(task["criteria"], ["left", "tie", "right"], strict=True))
    text = rendered(app)
    assert not [name for name in SECRET_NAMES if name.lower() in text.lower()]
    # Going back shows the stored choices highlighted; a new session (a reload) resumes at item 2.
    next(b for b in app.button if b.label == "← Previous").click().run()
    assert choice(app, task["criteria"][1], "tie").proto.type == "primary"
    assert choice(app, task["criteria"][1], "left").proto.type == "secondary"
    reloaded = signed_in(ANNOTATE, "dr.ada")
    assert reloaded.progress[0].proto.text.startswith("1 of 6 done · item 2 of 6")
    # The other annotator sees the same item with nothing chosen.
    other = signed_in(ANNOTATE, "dr.bo")
    assert other.progress[0].proto.text.startswith("0 of 6 done · item 1 of 6")
    assert all(b.proto.type == "secondary" for b in other.button if b.key and b.key.startswith("choose-"))


def test_clicks_on_a_page_drawn_before_the_last_answer_was_stored_still_move_on(seeded: SeededRuns) -> None:
    """A fast clinician clicks the next criterion while the page still reruns after the previous click, so the
    button clicked belongs to a page drawn before that answer was stored. The item is complete all the same and the
    queue moves on (the browser test's lost "item 2 of 6" on a loaded CI machine)."""
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators", "dr.ada",
                       "--seed", "21")
    app = signed_in(ANNOTATE, "dr.ada")
    first, second, third = task["criteria"]
    choice(app, first, "left").click().run()
    # Both clicks land on the page drawn with only the first answer stored; one rerun handles them.
    choice(app, second, "tie").click()
    choice(app, third, "right").click()
    app.run()
    assert not app.exception
    assert answers.my_items(current_store(), "dr.ada", task["id"])[0].answers == {
        first: "left", second: "tie", third: "right"}
    assert app.progress[0].proto.text.startswith("1 of 6 done · item 2 of 6")


def test_patient_answer_and_judge_review_items_render(seeded: SeededRuns) -> None:
    create_task("patient-answers", "--run", seeded.ddxplus_run, "--annotators", "dr.cy", "--max-items", "3")
    create_task("judge-review", "--run", seeded.judge_run_a, "--annotators", "dr.cy", "--max-items", "2")
    app = signed_in(ANNOTATE, "dr.cy")
    assert [s.value for s in app.subheader] == ["Case record", "Question", "Simulated patient's answer"]
    assert [b.label for b in app.button if b.key and b.key.startswith("choose-")] == [
        "0 · contradicts the record", "1 · partly consistent", "2 · consistent",
        "0 · does not answer", "1 · partly answers", "2 · answers the question"]
    choice(app, "truthfulness", "2").click().run()
    choice(app, "relevance", "1").click().run()
    assert app.progress[0].proto.text.startswith("1 of 3 done")
    app.selectbox[0].select_index(1).run()
    assert [s.value for s in app.subheader] == ["Case and reference", "Response", "Judge's verdict"]
    assert [b.label for b in app.button if b.key and b.key.startswith("choose-")] == [
        "Agree with the verdict", "Disagree"]
    text = rendered(app)
    assert not [name for name in (*SECRET_NAMES, "kb-bayes") if name.lower() in text.lower()]


def test_admin_pages_refuse_annotators_and_serve_administrators(seeded: SeededRuns) -> None:
    for page in (TASKS_PAGE, RESULTS):
        app = signed_in(page, "dr.ada")
        assert [e.value for e in app.error] == [
            "This page is for administrators; your annotation queue is on the Annotate page."]
        assert not app.dataframe and not app.selectbox
    app = signed_in(TASKS_PAGE, "admin.eve")
    assert [t.value for t in app.title] == ["Annotation tasks"]
    # Runs are listed newest first: the default pair (a dialogue run and a judge's score run) is refused.
    next(b for b in app.button if b.label == "Create task").click().run()
    assert [e.value for e in app.error] == [
        "Run ddi-beta-run-judge is a score run (a judge's verdicts); compare the runs whose outputs were scored, "
        "such as ddi-beta-run."]
    app.selectbox(key="task-run-a").set_value(seeded.run_a)
    app.selectbox(key="task-run-b").set_value(seeded.run_b)
    app.multiselect[0].set_value(["dr.ada", "dr.bo"])
    next(b for b in app.button if b.label == "Create task").click().run()
    assert not app.exception and not app.error
    [created] = tasks.list_tasks(current_store())
    assert created.kind == "pairwise" and created.config["annotators"] == ["dr.ada", "dr.bo"]
    assert any(s.value.startswith(f"Created task {created.id}") for s in app.success)

    app.radio(key="task-kind").set_value("judge-review").run()
    app.selectbox[0].set_value(seeded.judge_run_a)
    app.multiselect[0].set_value(["dr.cy"])
    next(b for b in app.button if b.label == "Create task").click().run()
    assert not app.exception and not app.error
    app.radio(key="task-kind").set_value("patient-answers").run()
    app.multiselect[0].set_value([seeded.ddxplus_run])
    app.multiselect[1].set_value(["dr.cy"])
    next(b for b in app.button if b.label == "Create task").click().run()
    assert not app.exception and not app.error
    assert [t.kind for t in tasks.list_tasks(current_store())] == ["pairwise", "judge-review", "patient-answers"]
    assert [len(tasks.task_items(current_store(), t.id)) for t in tasks.list_tasks(current_store())][:2] == [6, 6]

    store = current_store()
    for item in answers.my_items(store, "dr.ada", created.id):
        for criterion in created.criteria:
            answers.record_answer(store, "dr.ada", item.item_id, criterion, "left")
    results = signed_in(RESULTS, "admin.eve")
    assert not results.exception
    assert [t.value for t in results.title] == ["Annotation results"]
    results.selectbox(key="results-task").set_value(created.id).run()  # the newest task is shown first
    frame = results.dataframe[0].value
    assert list(frame["criterion"]) == created.criteria and list(frame["ties"]) == [0, 0, 0]
    assert (frame["A wins"] + frame["B wins"] == 6).all()
    assert any(b.proto.label == "Download every answer (CSV)" for b in results.get("download_button"))


OIDC_SECRETS = {"redirect_uri": "http://localhost:8501/oauth2callback", "cookie_secret": "test-cookie-secret",
                "client_id": "medeval", "client_secret": "test-client-secret",
                "server_metadata_url": "https://idp.example.org/.well-known/openid-configuration"}


def test_openid_connect_sign_in_when_secrets_configure_it(seeded: SeededRuns) -> None:
    cli("annotators", "add", "eve@example.org", "--oidc")
    create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators", "eve@example.org")
    app = AppTest.from_file(ANNOTATE, default_timeout=60)
    app.secrets["auth"] = OIDC_SECRETS
    app.user = {"is_logged_in": False}
    app.run()
    assert [b.label for b in app.button] == ["Sign in with your organisation's account"]
    assert not app.text_input  # no passcode form when the organisation's provider signs people in
    app.user = {"is_logged_in": True, "email": "stranger@example.org"}
    app.run()
    assert "stranger@example.org has no active annotator account" in app.error[0].value
    app.user = {"is_logged_in": True, "email": "eve@example.org"}
    app.run()
    assert not app.exception and [t.value for t in app.title] == ["Annotate"]
    assert app.progress[0].proto.text.startswith("0 of 6 done")


def test_the_optional_comment_is_stored_as_its_own_answer(seeded: SeededRuns) -> None:
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators", "dr.ada")
    app = signed_in(ANNOTATE, "dr.ada")
    app.text_area[0].input("Response 2 misses the subtype.").run()
    [row] = current_store().annotations(task["id"])
    assert (row.criterion, row.value, row.annotator) == (tasks.COMMENT, "Response 2 misses the subtype.", "dr.ada")
    assert app.progress[0].proto.text.startswith("0 of 6 done")  # a comment is not a judgement


def test_skip_and_flag_take_items_out_of_the_queue_and_reach_the_administrator(seeded: SeededRuns) -> None:
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators",
                       "dr.ada,dr.bo", "--seed", "21")
    store = current_store()
    first, second = answers.my_items(store, "dr.ada", task["id"])[:2]
    app = signed_in(ANNOTATE, "dr.ada")
    app.button(key=f"skip-{first.item_id}").click().run()
    assert not app.exception
    assert app.progress[0].proto.text.startswith("0 of 6 done · item 2 of 6 · 1 skipped or flagged")
    # A flag needs a reason: without one nothing is stored and the annotator is told what to do.
    app.button(key=f"flag-{second.item_id}").click().run()
    assert [e.value for e in app.error] == ["Say why you flag this item, so the administrator can act on it."]
    app.text_input(key=f"flag-reason-{second.item_id}").input("The image is of the wrong lesion.")
    app.button(key=f"flag-{second.item_id}").click().run()
    assert app.progress[0].proto.text.startswith("0 of 6 done · item 3 of 6 · 2 skipped or flagged")
    # Both are appended rows, not overwrites; a reload resumes after them.
    rows = [(r.criterion, r.value) for r in store.annotations(task["id"])]
    assert rows == [(tasks.SKIP, "skipped"), (tasks.FLAG, "The image is of the wrong lesion.")]
    assert signed_in(ANNOTATE, "dr.ada").progress[0].proto.text.startswith("0 of 6 done · item 3 of 6")
    third = answers.my_items(store, "dr.ada", task["id"])[2]
    for criterion in task["criteria"]:
        answers.record_answer(store, "dr.ada", third.item_id, criterion, "tie")

    admin = signed_in(TASKS_PAGE, "admin.eve")
    assert not admin.exception
    assert [s.value for s in admin.subheader] == ["Tasks", "Progress per annotator", "Flagged items"]
    progress = admin.dataframe[1].value
    assert progress.to_dict("records") == [
        {"task": "Which response is better?", "annotator": "dr.ada", "done": 1, "skipped": 1, "flagged": 1,
         "remaining": 3, "assigned": 6},
        {"task": "Which response is better?", "annotator": "dr.bo", "done": 0, "skipped": 0, "flagged": 0,
         "remaining": 6, "assigned": 6}]
    flags = admin.dataframe[2].value
    assert list(flags["annotator"]) == ["dr.ada"] and list(flags["item_id"]) == [second.item_id]
    assert list(flags["reason"]) == ["The image is of the wrong lesion."]
    # Skips and flags are not judgements: the results count none of them.
    results = signed_in(RESULTS, "admin.eve")
    assert list(results.dataframe[0].value["ties"]) == [1, 1, 1]


def test_results_name_runs_by_their_labels_not_their_ids(seeded: SeededRuns) -> None:
    task = create_task("pairwise", "--run-a", seeded.run_a, "--run-b", seeded.run_b, "--annotators", "dr.ada")
    store = current_store()
    store.update_run(seeded.run_a, label="Alpha, first prompt")
    results = signed_in(RESULTS, "admin.eve")
    results.selectbox(key="results-task").set_value(task["id"]).run()
    frame = results.dataframe[0].value
    # Each run shows its label beside its model (the default labels are alike), never its id.
    assert set(frame["A"]) == {f"Alpha, first prompt · {MODEL_A}"}
    assert set(frame["B"]) == {f"DDI open: model run · {MODEL_B}"}
    assert not [name for name in (seeded.run_a, seeded.run_b) if name in rendered(results)]
