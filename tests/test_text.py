"""Text the ledger can store: finding NUL characters and lone surrogates, refusing them with a
message that says where, and escaping them in diagnostic text."""

from __future__ import annotations

import pytest

from agentledger import ToolCall, UsageError
from agentledger._values import Unstorable, check_storable, find_unstorable, printable
from agentledger.errors import UnstorableTextError
from agentledger.llm import InferenceResponse

VALID = [
    "",
    "plain text",
    "é 漢字 ünïcödé",
    "an emoji 🙂 and a flag 🇳🇴",  # non-BMP: one code point each in a str, not surrogates
    "\U0010ffff",
    "\x01 \x1f \x7f \ufffd \ufeff",  # other control and special characters are text
    "\\x00 \\ud800",  # escapes, not the characters
]


@pytest.mark.parametrize("text", VALID, ids=range(len(VALID)))
def test_valid_unicode_without_nul_is_storable(text):
    assert find_unstorable(text) is None
    check_storable(text, "the text")
    assert printable(text) == text


@pytest.mark.parametrize(
    ("text", "character", "offset"),
    [
        ("\x00", "\x00", 0),
        ("before\x00after", "\x00", 6),
        ("🙂🙂\x00", "\x00", 2),
        ("a\ud800", "\ud800", 1),
        ("ab\udfff", "\udfff", 2),
        ("x\udc80\x00", "\udc80", 1),
    ],
)
def test_the_first_nul_or_lone_surrogate_is_found_at_its_offset(text, character, offset):
    assert find_unstorable(text) == Unstorable(character, offset)


def test_a_surrogate_pair_written_as_two_code_points_is_two_lone_surrogates():
    pair = "\ud83d\ude42"  # what UTF-16 uses for 🙂; in a str, not the emoji
    assert find_unstorable(pair) == Unstorable("\ud83d", 0)
    assert find_unstorable("🙂") is None


@pytest.mark.parametrize(
    ("value", "path", "in_key"),
    [
        ({"a": "ok", "b": "x\x00"}, "['b']", False),
        ({"a\x00": "ok"}, "['a\\x00']", True),
        (["ok", ("ok", "\x00")], "[1][1]", False),
        ({"a": [{"b": {"c": "\ud800"}}]}, "['a'][0]['b']['c']", False),
        ({1: "\x00"}, "[1]", False),
    ],
    ids=["dict value", "dict key", "nested sequences", "deep", "int key"],
)
def test_the_path_leads_to_the_string_that_holds_it(value, path, in_key):
    found = find_unstorable(value)

    assert found is not None
    assert (found.path, found.in_key) == (path, in_key)


def test_numbers_booleans_and_none_are_storable():
    assert find_unstorable({"n": 1, "f": 2.5, "b": True, "none": None, "l": [1, None]}) is None


def test_pydantic_models_are_walked_by_field_name():
    call = ToolCall(id="c1", name="open_box", arguments={"box": "bef\x00re"})
    response = InferenceResponse(content="ok", tool_calls=[call])

    found = find_unstorable(response)

    assert found == Unstorable("\x00", 3, "tool_calls[0].arguments['box']")
    assert str(found) == "a NUL character at offset 3 of tool_calls[0].arguments['box']"


def test_the_first_unstorable_character_is_reported_in_field_order():
    response = InferenceResponse(content="\ud800", reasoning="\x00", metadata={"k": "\x00"})

    assert find_unstorable(response) == Unstorable("\ud800", 0, "content")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("before\x00after", "a NUL character at offset 6"),
        ("x\ud800", "a lone surrogate (U+D800) at offset 1"),
        ({"k\udfff": 1}, "a lone surrogate (U+DFFF) at offset 1 of the key ['k\\udfff']"),
    ],
)
def test_the_description_names_the_character_and_where_it_is(value, expected):
    assert str(find_unstorable(value)) == expected


def test_check_storable_says_what_where_which_character_and_what_to_do():
    with pytest.raises(UnstorableTextError) as raised:
        check_storable({"box": "a\x00"}, "the tool's arguments")

    message = str(raised.value)
    assert message.startswith("the tool's arguments holds a NUL character at offset 1 of ['box']")
    assert "valid Unicode without NUL" in message
    assert "base64" in message
    assert "\x00" not in message
    assert isinstance(raised.value, UsageError)


def test_the_message_never_holds_the_character_itself():
    with pytest.raises(UnstorableTextError) as raised:
        check_storable({"k\ud800": "v"}, "the metadata")

    assert find_unstorable(str(raised.value)) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("before\x00after", "before\\x00after"),
        ("a\ud800b\udfff", "a\\ud800b\\udfff"),
        ("\x00\x00", "\\x00\\x00"),
        ("🙂 \x01 \\x00", "🙂 \x01 \\x00"),
    ],
)
def test_printable_escapes_nul_and_lone_surrogates_and_leaves_the_rest(text, expected):
    assert printable(text) == expected
    assert find_unstorable(printable(text)) is None
