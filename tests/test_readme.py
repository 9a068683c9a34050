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
from dataclasses import dataclass
from pathlib import Path

import pytest

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


# One test, not one per example: xdist would spread parametrized cases over its workers, and
# the point is that the examples share one folder, in order.
def test_every_example_runs_in_order_in_one_folder_and_again_last_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python` run in that folder would import
    run_all(EXAMPLES, "first (document order)")
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
