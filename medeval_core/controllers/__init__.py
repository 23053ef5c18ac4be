"""One controller per generic page in ``pages/``: everything the page does besides layout (reading the store,
validating input, saving, checking endpoints). A page imports its controller, streamlit and
``medeval_core.plaintext`` only, never the store (``tests/test_page_imports.py``); a benchmark's own pages have
their controllers beside them in ``benchmarks/<name>/``."""
