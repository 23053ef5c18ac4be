"""The app shell: navigation, status sidebar and home page, through AppTest and in a real headless Chromium."""

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from medeval_core.catalog import pages

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_home_page_shows_what_medeval_is_and_the_status_of_data_store_and_models() -> None:
    app = AppTest.from_file(APP, default_timeout=60).run()
    assert not app.exception, app.exception
    assert app.title[0].value == "medeval"
    assert not any("url_path" in m.value for m in app.markdown)  # no source comment drawn on the page
    headers = [h.value for h in app.header]
    assert headers[:2] == ["Start here", "Pages"] and {"Data sources", "Model backends", "Store"} <= set(headers)
    sidebar_text = " ".join(m.value for m in app.sidebar.markdown)
    assert "DDXPlus" in sidebar_text and "found" in sidebar_text
    assert "DDI judge" in sidebar_text and "offline" in sidebar_text
    data_table = app.table[0].value
    states = data_table["Status"].to_dict()
    assert states["DDXPlus (English)"] == "found"
    missing = data_table[data_table["Status"] == "missing"]
    assert (missing["How to get it"].str.len() > 0).all(), "every missing source says how to get it"


def test_sidebar_explains_a_broken_store_instead_of_crashing(monkeypatch, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the database folder should be")
    monkeypatch.setenv("MEDEVAL_DB_URL", f"sqlite:///{blocker}/medeval.db")
    app = AppTest.from_file(APP, default_timeout=60).run()
    assert not app.exception
    assert any("cannot be opened" in e.value for e in app.sidebar.error)


def test_every_catalogued_page_file_exists() -> None:
    root = Path(APP).parent
    assert all((root / info.path).is_file() for info in pages())


def test_home_page_in_headless_chromium(streamlit_app, page, artifacts_dir: Path) -> None:
    url = streamlit_app()
    page.goto(url)
    page.get_by_role("heading", name="Data sources").wait_for()
    # Tables load after the headings: wait for cells so the screenshot shows what a clinician sees.
    page.locator("table").get_by_text("DDXPlus (English)").wait_for()
    page.locator("table").get_by_text("DDI judge").wait_for()
    assert page.get_by_text("Stanford AIMI DDI dataset").first.is_visible()
    screenshot = artifacts_dir / "home.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000


def test_sidebar_status_stays_when_a_page_stops_early_in_chromium(streamlit_app, page, tmp_path_factory) -> None:
    # AppTest drops the sidebar of a run that ended with st.stop(), so this is checked in the browser.
    db_url = f"sqlite:///{tmp_path_factory.mktemp('empty-store') / 'medeval.db'}"
    page.goto(f"{streamlit_app(MEDEVAL_DB_URL=db_url)}/")
    page.get_by_role("heading", name="Data sources").wait_for()
    page.get_by_role("link", name="Batch runs").first.click()
    page.get_by_text("No runs yet").wait_for()
    sidebar = page.get_by_test_id("stSidebar")
    for heading in ("Store", "Data", "Models"):
        sidebar.get_by_role("heading", name=heading).wait_for()  # waited for: a rerun may be redrawing it


def test_offline_stand_ins_are_shown_as_working_and_home_says_where_to_start() -> None:
    from streamlit.testing.v1 import AppTest

    from medeval_core.context import current_settings
    from medeval_core.status import backends_status

    rows = {row.role: row for row in backends_status(current_settings())}
    for role in ("SDBench gatekeeper", "SDBench judge"):
        assert (rows[role].backend, rows[role].working) == ("offline", True)
    assert rows["Vision-language model"].working is False
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert not app.exception
    assert "Start here" in [h.value for h in app.header]


def test_no_url_in_the_home_tables_is_rendered_as_a_link(monkeypatch, tmp_path: Path) -> None:
    # st.table renders cells as Markdown: a bare URL in a hint would become a link. An empty data folder makes every
    # source missing, so the DDI hint (which names its website) is in the table.
    from medeval_core.plaintext import WORD_JOINER

    monkeypatch.setenv("MEDEVAL_DATA_DIR", str(tmp_path))
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert not app.exception, app.exception
    cells = [str(cell) for table in app.table for cell in table.value.to_numpy().ravel()]
    shown = [cell.replace("\\", "") for cell in cells]
    assert any("https:" + WORD_JOINER + "//ddi-dataset" in cell for cell in shown)
    assert not [cell for cell in shown if re.search(r"https?://|www\.", cell)]


def test_no_page_script_has_a_bare_string_that_streamlit_would_draw() -> None:
    """Streamlit's magic writes every bare expression of a page script to the page: a docstring below the first
    statement (an attribute docstring, say) would show to the clinician as text."""
    import ast

    root = Path(APP).parent
    scripts = [Path(APP), *sorted(root.glob("pages/*.py")), *sorted(root.glob("medeval_core/benchmarks/*/page_*.py"))]
    for script in scripts:
        body = ast.parse(script.read_text(encoding="utf-8")).body
        strays = [node.lineno for node in body[1:]
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str)]
        assert not strays, f"{script.name}: bare strings at lines {strays} would be drawn on the page"
