"""SDBench-style sequential diagnosis (Nori et al., arXiv 2506.22405; design.md §3.3): an agent asks questions and
orders tests of a gatekeeper until it commits a diagnosis, which a judge scores 1-5 against the reference, and
every visit and test is priced.

This module imports nothing (see ``medeval_core.benchmarks``); it names the roles, the CLI and its commands.
``spec`` holds the benchmark's spec (light: no model, pandas or embedding imports), so that the CLI and the app
start fast; ``benchmark.py`` is imported when an SDBench run is built.
"""

GATEKEEPER_ROLE = "gatekeeper"
JUDGE_ROLE = "sdbench-judge"
AGENT_ROLE = "chat"
PRICING_ROLE = "sdbench-pricing"

CLI = "medeval_core.benchmarks.sdbench.cli:CLI"
COMMANDS = ("cases", "recost")
