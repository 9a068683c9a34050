"""The README's Python examples run as written, so the docs cannot drift from the code."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("source", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_readme_example_runs(source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write a ledger file write it here
    exec(compile(source, str(README), "exec"), {"__name__": "readme_example"})
