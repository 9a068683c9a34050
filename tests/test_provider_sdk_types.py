"""Every request body the HTTP providers send (``support.request_bodies``: each form of request,
whole and streamed, and the bodies of real agent runs) checked against the official SDKs'
own param types, strictly (no key the SDK does not declare, every required one there):
``openai`` and ``anthropic`` at the newest installed here, and at the versions the price
table is dated from (openai 2.8.0, anthropic 0.75.0), in one subprocess with those first on
the path (``make test`` installs them in the venv's ``sdk-pinned`` directory).

What a body sends that one of those versions does not declare is listed in ``DIFFERENCES``,
key path by key path, with the SDK version that changed it: the check fails if such a key
passes where it should not, or fails anywhere else."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from agentledger.llm import ModelSettings
from support.request_bodies import PROVIDERS, Body, all_bodies, requests
from support.sdk_types import mismatches, type_named

ROOT = Path(__file__).resolve().parent.parent
PINNED_DIR = ROOT / ".venv" / "sdk-pinned"
PINNED = {"openai": "2.8.0", "anthropic": "0.75.0"}
"""The SDK versions of the price table's date."""
SDK_DEPENDENCIES = (
    "anyio",
    "distro",
    "docstring_parser",
    "httpx",
    "jiter",
    "pydantic",
    "sniffio",
    "typing_extensions",
)
"""What the pinned SDKs import, taken from the venv (they are installed without)."""


@dataclass(frozen=True)
class Difference:
    """A key a provider sends that one range of an SDK's versions does not declare: added in
    ``version`` (absent before), or removed in it (absent from it on)."""

    provider: str
    feature: str
    path: str
    """A regular expression of the key's JSON path."""
    sdk: str
    version: str
    removed: bool = False

    def applies(self, provider: str, versions: dict[str, str]) -> bool:
        """Whether the key is missing from the types at ``versions``."""
        newer = _version(versions[self.sdk]) >= _version(self.version)
        return provider == self.provider and (newer if self.removed else not newer)

    def explains(self, mismatch: str) -> bool:
        path, _, problem = mismatch.partition(": ")
        return re.fullmatch(self.path, path) is not None and problem.startswith("unexpected key")


DIFFERENCES = (
    Difference(
        "AnthropicMessages",
        "structured outputs (output_config)",
        r"\$\.output_config",
        "anthropic",
        "0.77.0",
    ),
    Difference(
        "AnthropicMessages", "strict tools", r"\$\.tools\[\d+\]\.strict", "anthropic", "0.77.0"
    ),
    Difference(
        "AnthropicMessages", "temperature", r"\$\.temperature", "anthropic", "1.0.0", removed=True
    ),
    Difference("AnthropicMessages", "top_p", r"\$\.top_p", "anthropic", "1.0.0", removed=True),
)
"""Where the SDKs' types and the bodies part, on purpose: structured outputs and strict tools
came with anthropic 0.77.0 (after the price table's 0.75.0); anthropic 1.0.0 dropped the
sampling settings from its types (Claude Opus 4.7 takes none), which older Claude models
still take and ``AnthropicMessages`` still sends when asked."""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


# -- the catalog and its two checks -------------------------------------------------------------


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> list[Body]:
    check_pinned_installed()
    return all_bodies(tmp_path_factory.mktemp("ledgers"))


@dataclass(frozen=True)
class Checked:
    """What one SDK version said of every body: its mismatches, by body name."""

    versions: dict[str, str]
    mismatches: dict[str, list[str]]


@pytest.fixture(scope="module")
def pinned_run(catalog: list[Body]) -> Iterator[Future[dict[str, Any]]]:
    """The check at the pinned versions: one subprocess for every body, started before the
    newest are checked here, and read when a test needs it."""
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(pinned_report, catalog)


@pytest.fixture(scope="module")
def pinned_check(pinned_run: Future[dict[str, Any]]) -> Checked:
    report = pinned_run.result()
    return Checked(report["versions"], report["mismatches"])


def pinned_report(catalog: list[Body]) -> dict[str, Any]:
    """What ``support.sdk_types`` reports with the pinned SDKs first on the path."""
    cases = [{"name": b.name, "type": b.param_type, "body": b.body} for b in catalog]
    path = os.pathsep.join([str(PINNED_DIR), str(ROOT / "tests")])
    done = subprocess.run(
        [sys.executable, "-m", "support.sdk_types"],
        input=json.dumps({"cases": cases, "modules": SDK_DEPENDENCIES}),
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": path},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def check_pinned_installed(directory: Path = PINNED_DIR) -> None:
    """A missing pinned directory fails, saying how to make it: never a skip."""
    if not all((directory / sdk).is_dir() for sdk in PINNED):
        pytest.fail(
            f"the SDKs pinned to the price table's versions are not in {directory}: run "
            "`make test` (its target .venv/sdk-pinned/.installed installs them)",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def newest_check(catalog: list[Body], pinned_run: Future[dict[str, Any]]) -> Checked:
    found = {
        b.name: [str(m) for m in mismatches(b.body, type_named(b.param_type))] for b in catalog
    }
    return Checked({sdk: version(sdk) for sdk in PINNED}, found)


def unexplained(catalog: list[Body], checked: Checked, provider: str) -> list[str]:
    """The mismatches of ``provider``'s bodies that no applicable difference explains, and
    the keys of an applicable difference that passed: each a line saying which body."""
    live = [d for d in DIFFERENCES if d.applies(provider, checked.versions)]
    wrong = []
    for body in (b for b in catalog if b.provider == provider):
        found = checked.mismatches[body.name]
        wrong += [f"{body.name}: {m}" for m in found if not any(d.explains(m) for d in live)]
        for path in key_paths(body.body):
            for difference in live:
                expected = re.fullmatch(difference.path, path) is not None
                if expected and not any(m.startswith(f"{path}: ") for m in found):
                    wrong.append(f"{body.name}: {path} passed, but {difference} says it cannot")
    return wrong


def key_paths(value: object, path: str = "$") -> Iterator[str]:
    """The JSON path of every key in ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{path}.{key}"
            yield from key_paths(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from key_paths(item, f"{path}[{index}]")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_body_is_of_the_newest_sdk_s_param_type(
    provider: str, catalog: list[Body], newest_check: Checked
) -> None:
    assert unexplained(catalog, newest_check, provider) == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_body_is_of_the_param_type_of_the_sdk_the_price_table_is_dated_from(
    provider: str, catalog: list[Body], pinned_check: Checked
) -> None:
    checked = pinned_check
    assert checked.versions == PINNED
    assert unexplained(catalog, checked, provider) == []


def test_each_difference_shows_at_the_versions_it_names_and_nowhere_else(
    catalog: list[Body], newest_check: Checked, pinned_check: Checked
) -> None:
    """Each difference is seen: a body sends its key, and it fails at the one version of the
    two that lacks it (so the list cannot outlive what it explains)."""
    for difference in DIFFERENCES:
        for checked in (newest_check, pinned_check):
            seen = [
                m
                for b in catalog
                if b.provider == difference.provider
                for m in checked.mismatches[b.name]
                if difference.explains(m)
            ]
            if difference.applies(difference.provider, checked.versions):
                assert seen, f"{difference} is seen in no body at {checked.versions}"
            else:
                assert seen == [], f"{difference} fails at {checked.versions}"


# -- what the pinned check runs on -------------------------------------------------------------


def test_the_pinned_sdks_shadow_the_newest_and_their_dependencies_import(
    pinned_run: Future[dict[str, Any]],
) -> None:
    report = pinned_run.result()

    assert report["versions"] == PINNED
    for sdk in PINNED:
        assert Path(report["locations"][sdk]).is_relative_to(PINNED_DIR)
    assert set(report["imported"]) == set(SDK_DEPENDENCIES)
    assert all(report["unknown"][t] == [] for t in report["unknown"])


def test_without_the_pinned_sdks_the_check_fails_saying_to_run_make_test(tmp_path: Path) -> None:
    (tmp_path / "openai").mkdir()

    with pytest.raises(pytest.fail.Exception, match=r"not in .*: run `make test`"):
        check_pinned_installed(tmp_path)


def test_the_newest_sdks_are_newer_than_the_pinned_ones() -> None:
    for sdk, pinned in PINNED.items():
        assert _version(version(sdk)) > _version(pinned), sdk


# -- what the catalog holds ---------------------------------------------------------------------


def test_the_catalog_has_every_provider_whole_and_streamed(catalog: list[Body]) -> None:
    counts = Counter((b.provider, b.streaming) for b in catalog)
    assert all(
        counts[provider, streaming] >= 30 for provider in PROVIDERS for streaming in (False, True)
    )
    assert all(b.body.get("stream") is (True if b.streaming else None) for b in catalog)


def test_every_model_setting_is_in_the_catalog() -> None:
    """A setting added to ``ModelSettings`` fails here until a request of the catalog sets
    it."""
    for provider in PROVIDERS:
        covered = {f for r in requests(provider).values() for f in r.settings.model_fields_set}
        skipped = {"stop_sequences"} if provider == "OpenAIResponses" else set()
        assert covered == set(ModelSettings.model_fields) - skipped, provider


def _has(catalog: list[Body], provider: str, pattern: str) -> bool:
    """Whether some body of ``provider`` has ``pattern`` in its JSON text."""
    return any(re.search(pattern, json.dumps(b.body)) for b in catalog if b.provider == provider)


FORMS = (
    ("OpenAIChat", r'"max_completion_tokens": '),
    ("OpenAIChat", r'"max_tokens": '),
    ("OpenAIChat", r'"role": "tool"'),
    ("OpenAIChat", r'"name": "alice"'),
    ("OpenAIChat", r'"strict": true'),
    ("OpenAIChat", r'"tool_choice": \{"type": "function"'),
    ("OpenAIChat", r'"parallel_tool_calls": false'),
    ("OpenAIChat", r'"response_format": \{"type": "json_schema"'),
    ("OpenAIChat", r'"stream_options": \{"include_usage": true\}'),
    ("OpenAIResponses", r'"instructions": '),
    ("OpenAIResponses", r'"type": "reasoning", "id": "rs_1"'),
    ("OpenAIResponses", r'"type": "function_call_output"'),
    ("OpenAIResponses", r'"text": \{"format": \{"type": "json_schema"'),
    ("OpenAIResponses", r'"tool_choice": \{"type": "function"'),
    ("AnthropicMessages", r'"is_error": true'),
    ("AnthropicMessages", r'"type": "thinking", "thinking": "Then London."'),
    (
        "AnthropicMessages",
        r'"name": "get_weather", "input": \{"city": "Paris"\}\}, \{"type": "thinking"',
    ),
    ("AnthropicMessages", r'"type": "redacted_thinking"'),
    ("AnthropicMessages", r'"cache_control": \{"type": "ephemeral", "ttl": "1h"\}'),
    ("AnthropicMessages", r'"tool_choice": \{"type": "any", "disable_parallel_tool_use": true'),
    ("AnthropicMessages", r'"tool_choice": \{"type": "tool"'),
    ("AnthropicMessages", r'"output_config": \{"format": '),
    ("AnthropicMessages", r'"thinking": \{"type": "enabled"'),
    ("AnthropicMessages", r'"stop_sequences": '),
)
"""A piece of JSON text each form of body has, by provider: the catalog must keep them all."""


def test_the_catalog_holds_each_form(catalog: list[Body]) -> None:
    missing = [(p, pattern) for p, pattern in FORMS if not _has(catalog, p, pattern)]
    assert missing == []


def test_anthropic_bodies_without_caching_carry_no_cache_control(catalog: list[Body]) -> None:
    uncached = [b for b in catalog if b.case.endswith("[no cache]")]
    assert uncached
    assert all("cache_control" not in json.dumps(b.body) for b in uncached)


def test_the_timeout_setting_does_not_reach_the_body(catalog: list[Body]) -> None:
    """``ModelSettings.timeout`` is the client's: the body is the one without it."""
    by_case = {(b.provider, b.case, b.streaming): b.body for b in catalog}
    timed = [key for key in by_case if key[1].startswith("timeout")]
    assert timed
    for provider, case, streaming in timed:
        plain = case.replace("timeout", "user text", 1)
        assert by_case[provider, case, streaming] == by_case[provider, plain, streaming]
