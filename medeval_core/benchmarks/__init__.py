"""One package per benchmark. Each package's ``__init__`` holds one light ``SPEC`` (name, title, factory path, CLI
extension, pages, model roles, judges, data sources); ``medeval_core.registry`` discovers them, so adding a
benchmark edits no core file."""
