"""Writing a file in one step (``files.replaced_in_one_step``): the old contents or the whole new ones, never half.
Reading JSON Lines (``files.json_lines``): each line's value, or its problem, exactly as ``json_value`` of that line
alone gives it."""

from __future__ import annotations

import pytest

from medeval_core.data.files import json_lines, json_value, problem_of, replaced_in_one_step


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


# Lines the whole-line scan must not take for one value: values with spaces around them, two values, a value
# spread over two lines, characters str.splitlines() would split at but bytes do not, a byte-order mark inside
# the file, nesting too deep to read; with line ends of every kind, and once with a line that is not UTF-8 (the
# file is then read line by line).
TRICKY_LINES = [b'{"a": 1}', b' {"a": 1}', b'{"a": 1} ', b'{"a": 1}\x0c', b'\x0b', b'', b'1 2', b'{"a": 1}{"b": 2}',
                b'{"a": [1', b'2]}', b'"x\xe2\x80\xa8y\xc2\x85z\x1c"', b'\xef\xbb\xbf{"a": 1}', b'\xc2\xa0',
                b"[" * 100_000, b"[" * 5000 + b"]" * 5000, b"NaN", b'"\\ud800"', b'"tab\tinside"', b"tru"]


@pytest.mark.parametrize("undecodable", [b"", b'"\xff"'], ids=["UTF-8", "one line not UTF-8"])
@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_json_lines_gives_each_line_what_json_value_gives_it_alone(tmp_path, end, undecodable):
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + end.join([*TRICKY_LINES, undecodable]) + end + b'{"last": true}')
    expected = []
    # The lines as bytes split them (what the readers did line by line before json_lines), blank ones left out.
    for number, line in enumerate(path.read_bytes().removeprefix(b"\xef\xbb\xbf").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            expected.append((number, repr(json_value(line.decode("utf-8"))), None))
        except ValueError as exc:
            expected.append((number, "None", problem_of(exc)))
    found = [(number, repr(value), problem and problem_of(problem))
             for number, value, problem in json_lines(path, ValueError, "missing")]
    assert found == expected
    assert found[0] == (1, "{'a': 1}", None) and found[-1] == (len(TRICKY_LINES) + 2, "{'last': True}", None)
