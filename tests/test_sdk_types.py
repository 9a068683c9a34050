"""The strict validator of JSON against the official SDKs' param types (``support.sdk_types``),
checked on its own: it must reject what the SDK's types do not allow, at the path where it
is, or the check of the providers' bodies would prove nothing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, NotRequired, Required

import pytest
from typing_extensions import ReadOnly, TypedDict

from support.request_bodies import PARAM_TYPES
from support.sdk_types import SdkTypeError, check, mismatches, type_named, unknown_types

# The SDKs' types are imported when first used, not when the suite is collected.
MESSAGE_PARAMS = "anthropic.types.message_create_params.MessageCreateParamsNonStreaming"
CHAT_PARAMS = "openai.types.chat.completion_create_params.CompletionCreateParamsNonStreaming"
RESPONSE_PARAMS = "openai.types.responses.response_create_params.ResponseCreateParamsNonStreaming"


def problems(value: object, param_type: object) -> list[str]:
    """The mismatches of ``value``, as lines; ``param_type`` may be named by its dotted path."""
    if isinstance(param_type, str):
        param_type = type_named(param_type)
    return [str(m) for m in mismatches(value, param_type)]


MESSAGE = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
}


def test_a_body_as_the_sdk_types_it_passes() -> None:
    check(MESSAGE, type_named(MESSAGE_PARAMS))
    assert problems(MESSAGE, MESSAGE_PARAMS) == []


def test_an_extra_key_deep_in_a_list_of_blocks_is_named_with_its_path() -> None:
    body = MESSAGE | {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi", "colour": "red"}]}]
    }

    (found,) = problems(body, MESSAGE_PARAMS)

    assert found.startswith("$.messages[0].content[0].colour: unexpected key: TextBlockParam")


def test_every_element_of_a_list_is_checked_not_only_the_first() -> None:
    text = {"type": "text", "text": "Hi"}
    body = MESSAGE | {"messages": [{"role": "user", "content": [text, text, text | {"x": 1}]}]}

    (found,) = problems(body, MESSAGE_PARAMS)

    assert found.startswith("$.messages[0].content[2].x: unexpected key")


def test_a_wrong_literal_says_what_was_allowed() -> None:
    body = MESSAGE | {"messages": [{"role": "robot", "content": "Hi"}]}

    (found,) = problems(body, MESSAGE_PARAMS)

    assert found.startswith("$.messages[0].role: expected one of 'user' | 'assistant'")
    assert found.endswith(", got 'robot'")


def test_a_missing_required_key_is_named() -> None:
    body = {k: v for k, v in MESSAGE.items() if k != "max_tokens"}

    assert problems(body, MESSAGE_PARAMS) == [
        "$.max_tokens: missing: MessageCreateParamsNonStreaming requires it"
    ]


def test_a_union_reports_its_closest_branch() -> None:
    """A ``tool_result`` block with a bad field is reported as a faulty tool result, not as
    every other kind of block it is not."""
    block = {"type": "tool_result", "tool_use_id": "t1", "content": "22C", "is_error": "yes"}
    body = MESSAGE | {"messages": [{"role": "user", "content": [block]}]}

    (found,) = problems(body, MESSAGE_PARAMS)

    assert found == (
        '$.messages[0].content[0].is_error: expected bool, got "yes" '
        "(closest: ToolResultBlockParam)"
    )


def test_json_scalars_are_strict_a_bool_is_no_number_an_integer_is_a_float() -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}

    assert problems(body | {"temperature": 1}, CHAT_PARAMS) == []
    assert problems(body | {"temperature": True}, CHAT_PARAMS) != []
    assert problems(body | {"n": True}, CHAT_PARAMS) != []
    assert problems(body | {"n": 1.5}, CHAT_PARAMS) != []
    assert problems(body | {"stop": None}, CHAT_PARAMS) == []


def test_a_string_is_not_a_list_of_strings() -> None:
    body = {"model": "gpt-4o", "input": "Hi", "include": "reasoning.encrypted_content"}

    (found,) = problems(body, RESPONSE_PARAMS)

    assert found.startswith("$.include: expected list of ")
    assert found.endswith(', got "reasoning.encrypted_content"')


class Inner(TypedDict, total=False):
    """Written as the SDKs write theirs: under ``from __future__ import annotations``."""

    kind: Required[Literal["inner"]]
    note: str


@pytest.fixture(scope="module")
def aliased() -> Any:
    """A ``TypedDict`` with an aliased field (the SDK's own ``PropertyInfo``), qualifiers,
    a nested ``total=False`` one, a mapping and ``Any``."""
    from openai._utils import PropertyInfo

    fields = {
        "from_": Annotated[str, PropertyInfo(alias="from")],
        "count": NotRequired[ReadOnly[float]],
        "items": Required[Iterable[Inner]],
        "labels": NotRequired[dict[str, int]],
        "anything": NotRequired[Any],
    }
    return TypedDict("Aliased", fields)  # type: ignore[operator]


def test_an_aliased_field_is_checked_under_its_wire_name(aliased: Any) -> None:
    assert problems({"from": "a", "items": []}, aliased) == []
    assert problems({"from_": "a", "items": []}, aliased) == [
        "$.from_: unexpected key: Aliased has no such field",
        "$.from: missing: Aliased requires it",
    ]


def test_qualifiers_totality_mappings_and_any_are_read_from_the_type(aliased: Any) -> None:
    good = {
        "from": "a",
        "count": 2,
        "items": [{"kind": "inner"}, {"kind": "inner", "note": "n"}],
        "labels": {"x": 1},
        "anything": [{"deep": None}],
    }
    assert problems(good, aliased) == []
    assert problems(good | {"labels": {"x": "1"}}, aliased) == ['$.labels.x: expected int, got "1"']
    assert problems(good | {"items": [{"note": "n"}]}, aliased) == [
        "$.items[0].kind: missing: Inner requires it"
    ]


def test_a_failed_check_raises_with_every_mismatch_listed(aliased: Any) -> None:
    body = {"from": 1, "colour": "red", "items": [{"kind": "outer"}]}

    with pytest.raises(SdkTypeError) as raised:
        check(body, aliased, "the test body")

    assert str(raised.value).splitlines() == [
        "the test body is not a Aliased:",
        "  $.colour: unexpected key: Aliased has no such field",
        "  $.from: expected str, got 1",
        "  $.items[0].kind: expected one of 'inner', got 'outer'",
    ]


def test_a_type_the_validator_does_not_know_is_an_error_not_a_pass() -> None:
    class Odd(TypedDict):
        when: complex

    with pytest.raises(TypeError, match="does not know the type"):
        mismatches({"when": 1}, Odd)
    assert unknown_types(Odd) == {"<class 'complex'>"}


@pytest.mark.parametrize("dotted", sorted(set(PARAM_TYPES.values())))
def test_the_validator_knows_every_type_the_request_params_use(dotted: str) -> None:
    assert unknown_types(type_named(dotted)) == set()
