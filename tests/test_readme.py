"""The README's and the docs' Python examples run as written, so the docs cannot drift from the
code; and their relative links lead somewhere.

A reader copies the examples into one folder and runs them in the order they come, perhaps
twice, perhaps skipping some: each example must use a ledger file of its own (or a temporary
directory) and start afresh when its file is already there. So the examples run here the way a
reader runs them: every Python block of README.md, then of each docs/ page, in document order,
in one shared folder; then all of them once more in the same folder, last first, so that an
example that relies on what an earlier one left behind, or that fails on its own leftovers,
fails here.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.fake_provider import (
    FakeProvider,
    Received,
    Reply,
    openai_completion,
    openai_tool_call,
)
from support.sizes import SOAK

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCUMENTS = (README, *sorted((ROOT / "docs").glob("*.md")))

_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
_ANY_BLOCK = re.compile(r"^```.*?^```", flags=re.DOTALL | re.MULTILINE)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+)$", flags=re.MULTILINE)


@dataclass(frozen=True)
class Example:
    """One ```python block: where it is, for the traceback, and its code."""

    document: Path
    line: int  # the line of the block's first line of code
    source: str

    def __str__(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    def run(self) -> None:
        # Padded so that a traceback names the document's own line numbers.
        padded = "\n" * (self.line - 1) + self.source
        exec(compile(padded, str(self.document), "exec"), {"__name__": "docs_example"})


def examples_of(document: Path) -> list[Example]:
    text = document.read_text(encoding="utf-8")
    return [
        Example(document, text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in _PYTHON_BLOCK.finditer(text)
    ]


EXAMPLES = [example for document in DOCUMENTS for example in examples_of(document)]


README_LINES = 500
"""The most lines the README may have: it is a user's first hour, and depth goes in docs/."""


def test_the_readme_is_at_most_500_lines_and_opens_with_what_a_user_needs_first():
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= README_LINES, (
        f"README.md has {lines} lines, more than {README_LINES}: move the depth to a docs/ page "
        "and link it"
    )
    headings = _HEADING.findall(_ANY_BLOCK.sub("", text))
    assert headings[:3] == ["agentledger", "Quick start", "Two commands"], headings
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "agent.run(" in quick_start and "print(" in quick_start
    assert "with_separated_tool_trace" not in text  # the default needs no call


def test_the_readme_and_the_docs_have_python_examples():
    assert len(examples_of(README)) >= 5
    assert len(DOCUMENTS) > 5, "the docs/ pages are missing"


def run_all(examples: list[Example], which: str) -> None:
    for example in examples:
        try:
            example.run()
        except BaseException as exc:
            exc.add_note(f"the example at {example}, in the {which} pass")
            raise


def a_small_model(received: Received) -> Reply:
    """A model on loopback, as the examples that talk to a real one (the README's quick start)
    meet it: it calls the first tool it is offered once, with every required argument the name
    of a city, then answers with what the tool returned."""
    messages, tools = received.body["messages"], received.body.get("tools") or []
    if messages[-1]["role"] == "tool":
        return Reply(openai_completion(f"The tool says: {messages[-1]['content']}."))
    if not tools:
        return Reply(openai_completion("Hello."))
    function = tools[0]["function"]
    arguments = dict.fromkeys(function["parameters"].get("required", []), "Paris")
    return Reply(openai_completion(tool_calls=[openai_tool_call(function["name"], arguments)]))


@pytest.fixture
def model_on_loopback(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    """What a reader's environment gives the examples that talk to a real model: a key and a
    base URL (here a server on loopback that answers as Chat Completions does)."""
    provider = FakeProvider(responder=a_small_model)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-readme")
    monkeypatch.setenv("OPENAI_BASE_URL", provider.openai_url)
    yield provider
    provider.close()


# One test, not one per example: xdist would spread parametrized cases over its workers, and
# the point is that the examples share one folder, in order. `make soak` runs them all again,
# last first, over the first pass's files (a reader runs an example twice, or out of order).
def test_every_example_runs_in_order_in_one_folder_and_under_soak_again_last_first(
    tmp_path, monkeypatch, model_on_loopback
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python` run in that folder would import
    run_all(EXAMPLES, "first (document order)")
    if SOAK:
        run_all(EXAMPLES[::-1], "second (last first, over the first pass's files)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(document: Path) -> set[str]:
    text = _ANY_BLOCK.sub("", document.read_text(encoding="utf-8"))
    return {slug(heading) for heading in _HEADING.findall(text)}


def relative_links(document: Path) -> list[str]:
    text = _ANY_BLOCK.sub("", document.read_text(encoding="utf-8"))
    return [target for target in _LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(document):
    broken = []
    for target in relative_links(document):
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert broken == []
