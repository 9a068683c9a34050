"""The base install has no DuckDB (it comes with the ``analytics`` extra): the package, the
ledger, the command line and the demo work without it, and whatever needs it says what to
install. Each test runs a fresh interpreter in which importing DuckDB fails, as it does where it
is not installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentledger.ledger import Ledger

INSTALL = "pip install 'agentledger[analytics]'"

WITHOUT_DUCKDB = '''
import sys


class NoDuckDB:
    """Finds no DuckDB, nor its extension packages: as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("duckdb", "duckdb_extension_sqlite_scanner"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoDuckDB())
'''


def run_without_duckdb(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_DUCKDB + textwrap.dedent(code)],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def ledger_file(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.db"
    Ledger.open(path).close()
    return path


def test_analytics_imports_without_duckdb_and_each_entry_point_names_the_extra(
    ledger_file: Path,
) -> None:
    code = f"""
        import agentledger.analytics as analytics
        from agentledger import Analytics
        from agentledger.errors import ConfigurationError

        assert "duckdb" not in sys.modules
        for name, call in [
            ("Analytics.open", lambda: Analytics.open({str(ledger_file)!r})),
            ("export_parquet", lambda: analytics.export_parquet({str(ledger_file)!r}, "out")),
            ("script", lambda: analytics.script({str(ledger_file)!r})),
            ("summarize_export", lambda: analytics.summarize_export("out", [])),
        ]:
            try:
                call()
            except ConfigurationError as exc:
                print(name, "|", exc)
            else:
                raise SystemExit(f"{{name}} did not fail")
    """
    done = run_without_duckdb(code, ledger_file.parent)

    assert done.returncode == 0, done.stderr
    said = dict(line.split(" | ", 1) for line in done.stdout.splitlines())
    assert set(said) == {"Analytics.open", "export_parquet", "script", "summarize_export"}
    for message in said.values():
        assert message.startswith("DuckDB is not installed: agentledger's analytics")
        assert message.endswith(f"Install it: {INSTALL}")
    assert not (ledger_file.parent / "out").exists()


@pytest.mark.parametrize(
    "command",
    [["analytics", "report"], ["analytics", "sql"], ["export", "parquet", "out"]],
    ids=" ".join,
)
def test_the_analytics_and_export_commands_say_to_install_the_analytics_extra(
    ledger_file: Path, command: list[str]
) -> None:
    code = f"""
        from agentledger.cli import main

        sys.argv = ["agentledger", "--db", {str(ledger_file)!r}, *{command!r}]
        main()
    """
    done = run_without_duckdb(code, ledger_file.parent)

    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Error: DuckDB is not installed")
    assert INSTALL in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in ledger_file.parent.iterdir()) == ["ledger.db"]


def test_the_ledger_the_cli_and_the_demo_work_without_duckdb(tmp_path: Path) -> None:
    code = """
        from agentledger.cli import main

        sys.argv = ["agentledger", "demo", "--db-file", "demo.db"]
        try:
            main()
        except SystemExit as exit:
            assert not exit.code, exit.code
        sys.argv = ["agentledger", "--db", "demo.db", "runs"]
        try:
            main()
        except SystemExit as exit:
            assert not exit.code, exit.code
        assert "duckdb" not in sys.modules
    """
    done = run_without_duckdb(code, tmp_path)

    assert done.returncode == 0, done.stderr
    output = " ".join(done.stdout.split())
    assert "Metrics skipped: DuckDB is not installed" in output and INSTALL in output
    assert "completed" in output  # the demo's runs, listed by `agentledger runs`
    assert "Traceback" not in done.stderr
