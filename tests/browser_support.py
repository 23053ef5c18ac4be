"""Helpers for tests that drive a real Streamlit page in Chromium."""

from __future__ import annotations

# While a rerun draws the page again, Streamlit keeps the previous run's elements (marked data-stale) until the new
# run replaces them; where the layout shifts, one button or box is then in the page twice and a Playwright locator
# (strict) refuses to act. Tests wait for this after every action whose rerun they go on to read.
PAGE_SETTLED = ("() => document.querySelectorAll('[data-stale=\"true\"]').length === 0"
                " && !!document.querySelector('[data-testid=\"stApp\"][data-test-script-state=\"notRunning\"]')"
                " && !document.querySelector('[data-testid=\"stStatusWidgetRunningIcon\"]')")


def settle(page) -> None:
    """Wait until the rerun has replaced every element of the previous one and the script has finished."""
    page.wait_for_function(PAGE_SETTLED)
