# The README's two commands are `make demo` and `make test`; each sets up what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# uv installs into the virtual environment (it resolves and downloads in parallel: the dev extra
# in a fraction of pip's time on a fresh machine); pip installs uv itself.
PIP    := $(BIN)/uv pip install --quiet --python $(BIN)/python
# Python's compiled modules are cached under the virtual environment, even where the environment
# asks Python not to write them beside the sources (PYTHONDONTWRITEBYTECODE; an empty value is
# unset): without the cache, every test process and every subprocess a test starts compiles
# every module it imports again, and pytest rewrites every test module's asserts again.
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache
export PYTHONDONTWRITEBYTECODE :=

.PHONY: demo chat-app screenshots test test-bench test-oldest soak extras lint typecheck bench clean schema

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv

# One stamp per extra: re-installed whenever pyproject.toml changes.
# The demo ends with DuckDB metrics and the viewer to open on its ledger: it installs the
# analytics and ui extras.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/uv
	$(PIP) -e '.[analytics,ui]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/uv
	$(PIP) -e '.[dev]'
	touch $@

# The official SDKs at the versions the price table is dated from, apart from the newest the dev
# extra installs: tests/test_provider_sdk_types.py checks every request body against their
# param types in a subprocess with this directory first on PYTHONPATH. No dependencies: theirs
# come from the venv.
SDK_PINNED := $(VENV)/sdk-pinned
SDK_PINNED_VERSIONS := openai==2.8.0 anthropic==0.75.0

$(SDK_PINNED)/.installed: Makefile | $(BIN)/uv
	rm -rf $(SDK_PINNED)
	$(PIP) --no-deps --target $(SDK_PINNED) $(SDK_PINNED_VERSIONS)
	touch $@

demo: $(VENV)/.installed-run
	$(BIN)/agentledger demo

$(VENV)/.installed-examples: pyproject.toml | $(BIN)/uv
	$(PIP) -e '.[examples]'
	touch $@

# The example chat app on http://127.0.0.1:8000: offline unless OPENAI_API_KEY is set, its ledger
# chat-app.db here (or CHAT_APP_DB). uvicorn's options: make chat-app CHAT_APP_ARGS='--port 9000'
chat-app: $(VENV)/.installed-examples
	$(BIN)/uvicorn examples.chat_app.app:app $(CHAT_APP_ARGS)

# The viewer's screenshots in docs/images (docs/ui.md shows them): its pages over the demo's
# ledger in headless Chromium. Not part of make test; run it when the pages change.
screenshots: $(VENV)/.installed-dev
	PYTHONPATH=tests $(BIN)/python -m support.screenshots docs/images

# ruff, then the package's layering (import-linter's contracts are in pyproject.toml).
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy --strict src examples bench

# pytest in two parts: every test but the timing-sensitive ones on xdist workers (one more than
# the cores, as many tests wait on fsync, PostgreSQL or a subprocess; each worker with its own
# PostgreSQL server and temporary directories; a worker that runs out of tests takes some of
# another's, so no long test is left alone at the end), then those (marked serial)
# alone, collected only from the files that mark some. A plain `pytest` runs them all, one
# after the other. The checks (`make lint typecheck`) run beside the first part, in the time its
# workers wait; their output is printed when they end, and either failing fails `make test`.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
SERIAL_FILES = $(shell grep -rlE --include='test_*.py' 'mark\.serial' tests)
CHECKS_LOG := $(VENV)/checks.log

test: $(VENV)/.installed-dev $(SDK_PINNED)/.installed
	@$(MAKE) --no-print-directory lint typecheck > $(CHECKS_LOG) 2>&1 & checks=$$!; \
	$(BIN)/pytest -n $(WORKERS) --dist worksteal -m "not serial and not bench"; tests=$$?; \
	wait $$checks; checked=$$?; \
	echo "--- make lint typecheck ($$([ $$checked -eq 0 ] && echo passed || echo FAILED)):"; \
	cat $(CHECKS_LOG); [ $$tests -eq 0 ] && [ $$checked -eq 0 ]
	$(if $(SERIAL_FILES),$(BIN)/pytest -m serial $(SERIAL_FILES))

# The benchmarks, run end to end at a tiny size (each system records every turn, each report
# has its figures): they check bench/, not the library, and start a worker process per system,
# so `make test` leaves them to this target, which CI runs after it.
test-bench: $(VENV)/.installed-dev
	$(BIN)/pytest -n $(WORKERS) --dist worksteal -m bench tests/test_bench.py tests/test_bench_workers.py

# The suite again against the oldest SQLAlchemy, SQLModel, pydantic and Alembic that
# pyproject.toml allows (their lower bounds, read from it: pydantic>=2.7,<3 installs 2.7), in a
# virtual environment of its own; `make test` runs it against the newest. The OpenAI Agents SDK,
# the MCP SDK, LangGraph, Google's ADK and llm need newer ones: their extras are not installed,
# and the tests that import them (the README's examples, the package's exported members, the
# importer's among them) are left out, as is the wheel's (`make extras`).
OLDEST        := $(VENV)/oldest
OLDEST_LIBS   := sqlalchemy sqlmodel pydantic alembic
OLDEST_EXTRAS := test,analytics-postgresql,pandas,arrow,polars,examples,otel,datasette,ui
OLDEST_SKIP   := --ignore=tests/test_openai_agents_session.py --ignore=tests/test_openai_agents_contract.py \
    --ignore=tests/test_openai_agents_branches.py \
    --ignore=tests/test_mcp_server.py --ignore=tests/test_mcp_tools.py --ignore=tests/test_install_extras.py \
    --ignore=tests/test_exported_members.py --ignore=tests/test_readme.py \
    --ignore=tests/test_langgraph_conformance.py --ignore=tests/test_langgraph_saver.py \
    --ignore=tests/test_langgraph_rows.py --ignore=tests/reliability/test_langgraph_kills.py \
    --ignore=tests/test_langgraph_retention.py --ignore=tests/test_langgraph_trace.py \
    --ignore=tests/test_import.py --ignore=tests/test_import_langgraph.py \
    --ignore=tests/test_adk_sessions.py --ignore=tests/test_pydantic_ai_store.py \
    --ignore=tests/test_openai_agents_reads.py \
    --deselect=tests/test_bench_workers.py::test_every_saver_keeps_every_turn_of_the_chat_and_is_held_against_sqlitesaver \
    --deselect=tests/test_layers.py::test_each_framework_is_loaded_by_its_integration \
    --deselect=tests/test_scopes.py::test_a_session_on_a_scoped_handle_cannot_read_or_write_another_tenants_session
LOWER_BOUNDS  := import re, sys, tomllib; \
    wanted = sys.argv[1:]; \
    declared = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; \
    pins = [re.sub(r">=([^,;]+).*", r"==\1", d) for d in declared if re.split(r"[<>=~!\[; ]", d)[0] in wanted]; \
    assert len(pins) == len(wanted), f"lower bounds of {wanted} in pyproject.toml: {pins}"; \
    print(*pins)

$(OLDEST)/.installed: pyproject.toml | $(BIN)/uv
	rm -rf $(OLDEST)
	$(PYTHON) -m venv $(OLDEST)
	pins="$$($(BIN)/python -c '$(LOWER_BOUNDS)' $(OLDEST_LIBS))" && \
	    $(BIN)/uv pip install --quiet --python $(OLDEST)/bin/python -e '.[$(OLDEST_EXTRAS)]' $$pins
	touch $@

test-oldest: $(OLDEST)/.installed $(SDK_PINNED)/.installed
	$(OLDEST)/bin/pytest -n $(WORKERS) --dist worksteal -m "not serial and not bench" $(OLDEST_SKIP)
	$(if $(SERIAL_FILES),$(OLDEST)/bin/pytest -m serial $(SERIAL_FILES))

# The reliability suite at its large size: 1,000 random kills per backend, a minute of writers;
# a ledger of every revision upgraded on PostgreSQL (make test: the oldest and the previous); the
# documents' examples run a second time, last first; and the files whose long tests make test
# runs on SQLite alone (SQLITE_UNLESS_SOAK), on both.
SOAK_ALSO = tests/test_migrations.py::test_a_ledger_written_at_any_revision_reads_whole_at_the_head_and_downgrades_back \
    tests/test_readme.py::test_every_example_runs_in_order_in_one_folder_and_under_soak_again_last_first \
    $(shell grep -rlE --include='test_*.py' '^@SQLITE_UNLESS_SOAK' tests)
soak: $(VENV)/.installed-dev
	AGENTLEDGER_SOAK=1 AGENTLEDGER_REQUIRE_PG=1 $(BIN)/pytest tests/reliability $(SOAK_ALSO) $(SOAK_ARGS)

# The wheel installed in fresh virtual environments, with no extra and with each one: the base
# install brings no analytics engine, and each extra what its conversion needs. Slow (packages
# from the registry): not part of `make test`; CI runs it after the tests.
extras: $(VENV)/.installed-dev
	AGENTLEDGER_EXTRAS=1 $(BIN)/pytest tests/test_install_extras.py $(EXTRAS_ARGS)

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/uv
	$(PIP) -e '.[dev,bench]'
	touch $@

bench: $(VENV)/.installed-dev $(VENV)/.installed-bench
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Regenerate schema/*.sql from the migrations (a test checks they are current).
schema: $(VENV)/.installed-dev
	$(BIN)/agentledger db schema --dialect sqlite --output schema/sqlite.sql
	$(BIN)/agentledger db schema --dialect postgresql --output schema/postgresql.sql
