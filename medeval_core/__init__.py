"""medeval core: models, judges, benchmarks, metrics and the store behind the medeval workbench."""

from medeval_core.redaction import install_log_redaction

__version__ = "0.1.0"

# Here, not in each entry point: the CLI, the app, the workers and library users all import this package first.
install_log_redaction()
