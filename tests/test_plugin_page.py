"""A benchmark outside the checkout declares a page as the built-in ones do (``page_*.py`` beside its spec, named by
``PageInfo(path=str(Path(__file__).with_name(...)))``): the app shell lists it in the navigation and serves it, and
the home page lists it under "Start here" when the spec says it needs no model.

The plugin package is written to a temporary folder (not importable from the checkout), put on ``sys.path`` and
named in ``MEDEVAL_BENCHMARKS``; its page calls its own controller module, which reads the app's store."""

import textwrap
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medeval_core import registry
from medeval_core.catalog import pages

APP = str(Path(__file__).resolve().parent.parent / "app.py")

SPEC_MODULE = '''
from pathlib import Path

from medeval_core.registry import BenchmarkSpec, PageInfo

SPEC = BenchmarkSpec(
    name="outside", title="Outside (toy)", description="A toy benchmark kept outside the checkout.",
    factory="tests.support.counting_benchmark:CountingBenchmark",
    pages=(PageInfo(path=str(Path(__file__).with_name("page_tally.py")), title="Outside tally",
                    icon=":material/calculate:", section="Benchmarks", url_path="outside-tally",
                    description="The outside benchmark's own page.", start_here="count without a model"),),
)
'''

CONTROLLER_MODULE = '''
from medeval_core.context import current_store


def stored_runs() -> int:
    return len(current_store().list_runs())
'''

PAGE_MODULE = '''
import streamlit as st

from outside_toy import controller

st.title("Outside tally")
st.write(f"{controller.stored_runs()} runs stored")
'''


@pytest.fixture
def outside_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "plugins" / "outside_toy"
    package.mkdir(parents=True)
    for name, source in (("__init__.py", SPEC_MODULE), ("controller.py", CONTROLLER_MODULE),
                         ("page_tally.py", PAGE_MODULE)):
        (package / name).write_text(textwrap.dedent(source), encoding="utf-8")
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.setenv("MEDEVAL_BENCHMARKS", "outside_toy")
    return package / "page_tally.py"


def test_a_plugin_page_outside_the_checkout_is_listed_and_served_by_the_app_shell(outside_plugin: Path) -> None:
    (declared,) = registry.spec("outside").pages
    assert Path(declared.path) == outside_plugin and declared in pages()

    app = AppTest.from_file(APP, default_timeout=60).run()
    assert not app.exception, app.exception
    assert "Outside tally" not in [t.value for t in app.title]  # the home page opens first
    assert "Outside tally: count without a model" in [link.proto.label for link in app.get("page_link")]
    # switch_page refuses a file that st.navigation did not register, so this also checks the page is listed.
    app.switch_page(str(outside_plugin)).run()
    assert not app.exception, app.exception
    assert [t.value for t in app.title] == ["Outside tally"]
    assert "0 runs stored" in [m.value for m in app.markdown]
    assert any(h.value == "Store" for h in app.sidebar.subheader)  # drawn inside the shell, with its sidebar


def test_without_the_plugin_its_page_is_not_served(outside_plugin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDEVAL_BENCHMARKS")
    app = AppTest.from_file(APP, default_timeout=60).run()
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        app.switch_page(str(outside_plugin))
