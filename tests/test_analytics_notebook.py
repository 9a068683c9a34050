"""The analytics notebook (``analytics/notebook.ipynb``) runs top to bottom as written, on the
demo ledger it makes, so the walk-through cannot rot: executed headless by nbclient on an IPython
kernel, as Jupyter runs it, with no cell in error and the report's charts drawn inline."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parent.parent / "analytics" / "notebook.ipynb"
SVG = "{http://www.w3.org/2000/svg}"
CHARTS = {
    "tokens": "Tokens (input + output) per hour",
    "cost": "Cost (USD) per hour",
    "cost_tree": "The 3 most expensive runs and their subagent runs, by cost",
    "tool_latency": "Tool call duration percentiles",
    "tool_errors": "Tool calls that returned an error",
}
"""Each chart the notebook shows (the name ``show`` is given), by its title: the demo runs in a
few seconds, so usage is bucketed by hour; all its steps are priced, so the tree is by cost."""


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


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The notebook executed by nbclient in a directory of its own (it writes demo.db and its
    Parquet export there); raises ``CellExecutionError`` naming the cell when one fails."""
    directory = tmp_path_factory.mktemp("notebook")
    run = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        run, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(directory)}}
    )
    client.execute()
    return run, directory


def outputs(run: Any) -> list[tuple[str, Any]]:
    """Every output of the executed notebook, with the source of its cell."""
    return [
        (cell.source, output)
        for cell in run.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    ]


def test_every_code_cell_runs_in_order_without_an_error(executed: tuple[Any, Path]) -> None:
    run, directory = executed

    errors = [(source, output) for source, output in outputs(run) if output.output_type == "error"]
    assert errors == []
    code = [cell for cell in run.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    assert (directory / "demo.db").is_file()
    assert (directory / "demo-parquet" / "step_executions").is_dir()
    # What the walk-through showed: the demo's three runs, the last one with two subagents.
    (statuses,) = [
        output.data["text/plain"]
        for source, output in outputs(run)
        if source.startswith("DEMO = ") and output.output_type == "execute_result"
    ]
    assert statuses.count("'completed'") == 3


def test_the_notebook_draws_the_reports_charts_inline(executed: tuple[Any, Path]) -> None:
    run, _ = executed

    drawn = {
        re.fullmatch(r'show\("(\w+)"\)', source).group(1): output.data["image/svg+xml"]
        for source, output in outputs(run)
        if "image/svg+xml" in output.get("data", {})
    }

    assert set(drawn) == set(CHARTS)
    for name, svg in drawn.items():
        root = ElementTree.fromstring(svg)  # a standalone SVG document, as Jupyter shows it
        assert root.tag == f"{SVG}svg", name
        assert root.findtext(f"{SVG}title") == CHARTS[name]
        bars = [
            rect
            for rect in root.iter(f"{SVG}rect")
            if float(rect.get("width", 0)) > 0 and float(rect.get("height", 0)) > 0
        ]
        assert bars, f"the {name} chart draws no bar"
