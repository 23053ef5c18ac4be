"""CLI subcommands, one module per area (see ``medeval_core.cli``)."""
