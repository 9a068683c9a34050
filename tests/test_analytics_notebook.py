"""The analytics notebook (``analytics/notebook.ipynb``) runs top to bottom as written, on the
demo ledger it makes, so the walk-through cannot rot. No Jupyter needed: the code cells run in
order in one namespace, as a kernel would run them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

NOTEBOOK = Path(__file__).resolve().parent.parent / "analytics" / "notebook.ipynb"


def notebook() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return loaded


def code_cells() -> list[dict[str, Any]]:
    return [cell for cell in notebook()["cells"] if cell["cell_type"] == "code"]


def test_the_notebook_is_nbformat_4_with_no_outputs_stored() -> None:
    loaded = notebook()

    assert loaded["nbformat"] == 4
    assert loaded["metadata"]["kernelspec"]["language"] == "python"
    assert len(code_cells()) >= 8
    for cell in code_cells():
        assert (cell["outputs"], cell["execution_count"]) == ([], None), cell["id"]
    ids = [cell["id"] for cell in loaded["cells"]]
    assert len(set(ids)) == len(ids)


def test_every_code_cell_runs_in_order_without_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the notebook writes demo.db and its Parquet export here
    namespace: dict[str, Any] = {"__name__": "__main__"}

    for cell in code_cells():
        source = "".join(cell["source"])
        exec(compile(source, f"{NOTEBOOK.name}, cell {cell['id']}", "exec"), namespace)

    assert (tmp_path / "demo.db").is_file()
    assert (tmp_path / "demo-parquet" / "step_executions").is_dir()
    # What the walk-through showed: the demo's three runs, the last one with two subagents.
    assert [result.status.value for result in namespace["results"]] == ["completed"] * 3
    assert len(namespace["tree"]) == 3
