"""Writing a file in one step (``files.replaced_in_one_step``): the old contents or the whole new ones, never half."""

from __future__ import annotations

import pytest

from medeval_core.data.files import replaced_in_one_step


def test_a_file_is_replaced_whole_or_not_at_all(tmp_path):
    path = tmp_path / "sub" / "cases.jsonl"
    with replaced_in_one_step(path, "w", encoding="utf-8") as handle:
        handle.write("first\n")
    assert path.read_text(encoding="utf-8") == "first\n"
    with pytest.raises(RuntimeError), replaced_in_one_step(path, "w", encoding="utf-8") as handle:
        handle.write("half of the sec")
        raise RuntimeError("stopped midway")
    assert path.read_text(encoding="utf-8") == "first\n"
    assert sorted(entry.name for entry in path.parent.iterdir()) == ["cases.jsonl"]  # no temporary left
