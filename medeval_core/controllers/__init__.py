"""One controller per generic page in ``pages/``: everything the page does besides layout (reading the store,
validating input, saving, checking endpoints). A page imports its controller, streamlit and
``medeval_core.plaintext`` only, never the store (``tests/test_page_imports.py``); a benchmark's own pages have
their controllers beside them in ``benchmarks/<name>/``."""

from __future__ import annotations

from pydantic import BaseModel


class Outcome(BaseModel):
    """What a page action came to: a notice to show when it was done, else the sentence saying why not."""

    notice: str | None = None
    error: str | None = None
