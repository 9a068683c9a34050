"""The value types: messages, collections, the store, the state, usage and budgets."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from agentledger import (
    AgentBuilder,
    AgentState,
    ExecutionBudget,
    Message,
    Messages,
    Role,
    ToolCall,
    Usage,
)
from agentledger._values import MessageStore, Section
from agentledger.llm import InferenceResponse, ScriptedLLM

IMMUTABLE = (ValidationError, AttributeError, TypeError)


def conversation() -> Messages:
    return Messages.of(
        Message.user("Hi"),
        Message.assistant("", tool_calls=[ToolCall(id="c1", name="f")]),
        Message.tool("result", tool_call_id="c1"),
        Message.assistant("Hello!"),
    )


# --- Message --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attribute", "value"),
    [("content", "changed"), ("role", Role.SYSTEM), ("tool_calls", ()), ("reasoning", "x")],
)
def test_a_message_cannot_be_changed(attribute, value):
    message = Message.user("Hi")

    with pytest.raises(IMMUTABLE):
        setattr(message, attribute, value)
    assert message.content == "Hi"


def test_a_tool_message_needs_the_id_of_the_call_it_answers():
    with pytest.raises(ValidationError, match="tool_call_id"):
        Message(role=Role.TOOL, content="result")
    with pytest.raises(ValidationError):
        Message.tool("result", tool_call_id="")


@pytest.mark.parametrize("role", [Role.USER, Role.SYSTEM, Role.TOOL])
def test_only_assistant_messages_carry_tool_calls(role):
    with pytest.raises(ValidationError):
        Message(role=role, tool_calls=(ToolCall(id="c1", name="f"),), tool_call_id="c0")


def test_a_message_with_no_content_has_empty_content():
    assert Message(role=Role.ASSISTANT, content=None).content == ""


@pytest.mark.parametrize(
    ("message", "role"),
    [
        (Message.system("s"), Role.SYSTEM),
        (Message.user("u"), Role.USER),
        (Message.assistant("a"), Role.ASSISTANT),
        (Message.tool("t", tool_call_id="c1"), Role.TOOL),
    ],
)
def test_message_constructors_set_the_role(message, role):
    assert message.role is role


def test_messages_get_distinct_time_ordered_ids():
    messages = [Message.user(str(n)) for n in range(50)]

    ids = [m.id for m in messages]
    assert len(set(ids)) == 50
    assert ids == sorted(ids)


def test_tool_trace_messages_are_recognised():
    assert [m.is_tool_trace() for m in conversation()] == [False, True, True, False]


# --- Role -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "text"),
    [
        (Role.SYSTEM, "system"),
        (Role.USER, "user"),
        (Role.ASSISTANT, "assistant"),
        (Role.TOOL, "tool"),
    ],
)
def test_a_role_is_equal_to_its_string(role, text):
    assert role == text
    assert isinstance(role, str)
    assert str(role) == text
    assert f"{role}" == text
    assert Role(text) is role
    assert Message(role=text, content="x", tool_call_id="c1").role is role


# --- Messages -------------------------------------------------------------------------------


def test_appending_returns_a_new_collection_and_leaves_the_original_unchanged():
    original = Messages.from_string("Hi")

    appended = original.append(Message.assistant("Hello"))

    assert len(original) == 1
    assert len(appended) == 2
    assert [m.content for m in appended] == ["Hi", "Hello"]


@pytest.mark.parametrize(
    "added",
    [
        Messages.of(Message.assistant("a"), Message.user("b")),
        [Message.assistant("a"), Message.user("b")],
        (Message.assistant("a"), Message.user("b")),
    ],
    ids=["Messages", "list", "tuple"],
)
def test_append_messages_accepts_a_collection_or_an_iterable(added):
    original = Messages.from_string("Hi")

    combined = original.append_messages(added)

    assert [m.content for m in combined] == ["Hi", "a", "b"]
    assert len(original) == 1


def test_append_messages_accepts_a_single_message():
    assert [m.content for m in Messages().append_messages(Message.user("x"))] == ["x"]


def test_appending_nothing_changes_nothing():
    original = Messages.from_string("Hi")

    assert list(original.append_messages([])) == list(original)


def test_messages_cannot_be_changed_in_place():
    messages = Messages.from_string("Hi")

    with pytest.raises(IMMUTABLE):
        messages.root = ()
    with pytest.raises(IMMUTABLE):
        messages[0] = Message.user("other")  # type: ignore[index]
    assert isinstance(messages.root, tuple)


@pytest.mark.parametrize("copied", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_a_copy_of_messages_is_the_same_messages(copied):
    """Immutable: a copy (pydantic's deep copy of a field default among them) is itself."""
    messages = Messages.from_string("Hi")
    assert copied(messages) is messages
    state = AgentState.empty().with_messages(messages)
    assert copied(state) == state


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        (None, Role.USER),
        ("user", Role.USER),
        ("assistant", Role.ASSISTANT),
        (Role.SYSTEM, "system"),
    ],
)
def test_from_string_makes_one_message_of_the_given_role(role, expected):
    messages = Messages.from_string("text") if role is None else Messages.from_string("text", role)

    (message,) = messages
    assert message.role == expected
    assert message.content == "text"


def test_filter_keeps_the_messages_that_match_in_order():
    kept = conversation().filter(lambda m: m.role is Role.ASSISTANT)

    assert isinstance(kept, Messages)
    assert [m.content for m in kept] == ["", "Hello!"]


def test_to_string_joins_the_non_empty_contents():
    assert conversation().to_string() == "Hi\nresult\nHello!"
    assert conversation().to_string(" | ") == "Hi | result | Hello!"
    assert Messages().to_string() == ""


def test_messages_support_len_iteration_indexing_and_slicing():
    messages = conversation()

    assert len(messages) == 4
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0].content == "Hi"
    assert messages[-1].content == "Hello!"
    sliced = messages[1:3]
    assert isinstance(sliced, Messages)
    assert [m.role for m in sliced] == [Role.ASSISTANT, Role.TOOL]
    assert list(messages[::-1]) == list(reversed(list(messages)))
    assert messages.first().content == "Hi"
    assert messages.last().content == "Hello!"
    assert Messages().first() is None
    assert Messages().is_empty()
    with pytest.raises(IndexError):
        messages[4]


def test_messages_add_up_with_plus():
    a = Messages.from_string("a")
    b = Messages.from_string("b")

    assert [m.content for m in a + b] == ["a", "b"]
    assert len(a) == 1


def test_equal_collections_compare_equal():
    first = conversation()

    assert Messages.of(*first) == first
    assert first != first.append(Message.user("more"))


# --- MessageStore and Section ---------------------------------------------------------------


def test_appending_to_a_section_returns_a_new_store_and_leaves_the_original_unchanged():
    store = MessageStore()

    changed = store.section("messages").append_messages([Message.user("a"), Message.user("b")])

    assert store.section("messages").is_empty()
    assert [m.content for m in changed.section("messages").messages()] == ["a", "b"]
    again = changed.section("messages").append_messages(Message.user("c"))
    assert len(changed.section("messages").messages()) == 2
    assert len(again.section("messages").messages()) == 3


def test_clearing_a_section_leaves_the_other_sections_alone():
    store = (
        MessageStore()
        .section("messages")
        .append_messages(Message.user("kept"))
        .section("execution_buffer")
        .append_messages(Message.assistant("trace"))
    )

    cleared = store.section("execution_buffer").clear()

    assert cleared.section("execution_buffer").is_empty()
    assert [m.content for m in cleared.section("messages").messages()] == ["kept"]
    assert not store.section("execution_buffer").is_empty()


def test_a_missing_section_is_empty():
    store = MessageStore()

    assert store.section("nowhere").messages() == Messages()
    assert store.select("nowhere", "else") == Messages()


def test_select_concatenates_sections_in_the_order_named():
    store = (
        MessageStore()
        .section("a")
        .append_messages(Message.user("1"))
        .section("b")
        .append_messages(Message.user("2"))
    )

    assert [m.content for m in store.select("b", "a")] == ["2", "1"]
    assert set(store.names()) == {"a", "b"}


def test_a_store_and_its_sections_cannot_be_changed_in_place():
    store = MessageStore().section("messages").append_messages(Message.user("a"))
    section = store.section("messages")

    assert isinstance(section, Section)
    with pytest.raises(IMMUTABLE):
        store.sections = {}
    with pytest.raises(IMMUTABLE):
        section.name = "other"  # type: ignore[misc]
    assert section.name == "messages"


# --- AgentState -----------------------------------------------------------------------------


def test_messages_for_inference_is_summary_buffer_messages_then_execution_buffer():
    store = MessageStore()
    for name in ("execution_buffer", "messages", "buffer", "summary", "scratch"):
        store = store.section(name).append_messages(Message.user(name))

    state = AgentState(store=store)

    assert [m.content for m in state.messages_for_inference()] == [
        "summary",
        "buffer",
        "messages",
        "execution_buffer",
    ]
    assert [m.content for m in state.messages()] == ["messages"]
    assert [m.content for m in state.execution_buffer()] == ["execution_buffer"]


def test_with_user_message_appends_to_the_conversation_and_leaves_the_state_unchanged():
    state = AgentState.empty()

    asked = state.with_user_message("Hi")

    assert state.messages().is_empty()
    assert [(m.role, m.content) for m in asked.messages()] == [(Role.USER, "Hi")]
    assert asked.conversation_id == state.conversation_id


def test_an_empty_state_gets_a_new_conversation_id_unless_given_one():
    assert AgentState.empty().conversation_id != AgentState.empty().conversation_id
    assert AgentState.empty(conversation_id="conv-1").conversation_id == "conv-1"


def test_a_state_cannot_be_changed_in_place():
    state = AgentState.empty()

    with pytest.raises(IMMUTABLE):
        state.run_id = "x"


def test_the_section_names_are_constants_of_the_state():
    assert AgentState.DEFAULT_SECTION == "messages"
    assert AgentState.EXECUTION_BUFFER_SECTION == "execution_buffer"


def run_with_everything(separated: bool) -> AgentState:
    def get_weather(city: str) -> str:
        """Weather."""
        return "sunny"

    llm = ScriptedLLM(
        [
            InferenceResponse(
                content="Looking.",
                tool_calls=(
                    ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"}),
                    ToolCall(id="c2", name="nope", arguments={"x": [1, {"y": None}]}),
                ),
                reasoning="think",
                usage=Usage(input_tokens=10, output_tokens=3, reasoning_tokens=1),
                cost_usd=0.001,
                finish_reason="tool_calls",
                metadata={"provider": {"id": "r1"}},
            ),
            InferenceResponse(tool_calls=(ToolCall(id="c3", name="get_weather"),)),
            InferenceResponse(content="Sunny.", reasoning="done", usage=Usage(input_tokens=20)),
        ]
    )
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([get_weather])
        .with_max_steps(2)
        .with_separated_tool_trace(separated)
        .build()
    )
    return agent.execute(AgentState.empty().with_user_message("Weather?"))


@pytest.mark.parametrize("separated", [True, False], ids=["separated", "inline"])
def test_a_state_round_trips_through_json_after_a_run(separated):
    state = run_with_everything(separated)

    restored = AgentState.model_validate_json(state.model_dump_json())

    assert restored == state
    assert restored.messages() == state.messages()
    assert restored.step_executions == state.step_executions
    assert restored.usage == state.usage
    assert restored.continuation_outcome == state.continuation_outcome
    assert restored.status is state.status


def test_a_restored_state_can_start_the_next_run():
    state = run_with_everything(True)
    restored = AgentState.model_validate_json(state.model_dump_json())
    llm = ScriptedLLM([InferenceResponse(content="Again sunny.")])

    after = AgentBuilder().with_llm(llm).build().execute(restored.with_user_message("Still?"))

    assert after.answer() == "Again sunny."
    assert [m.content for m in llm.requests[0].messages] == [
        "Weather?",
        "Sunny.",
        "Still?",
    ]


# --- Usage ----------------------------------------------------------------------------------


def test_usages_add_up_field_by_field():
    a = Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4)
    b = Usage(input_tokens=10, output_tokens=20, reasoning_tokens=5)

    total = a + b

    assert total == Usage(
        input_tokens=11,
        output_tokens=22,
        cache_read_tokens=3,
        cache_write_tokens=4,
        reasoning_tokens=5,
    )
    assert total.total_tokens == 33
    assert a == Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4)


def test_usages_add_up_with_sum():
    usages = [Usage(input_tokens=n, output_tokens=2 * n) for n in range(1, 5)]

    assert sum(usages) == Usage(input_tokens=10, output_tokens=20)
    assert sum(usages, Usage()) == Usage(input_tokens=10, output_tokens=20)
    assert Usage() + Usage() == Usage()
    assert Usage().is_zero()


def test_a_usage_cannot_be_negative():
    with pytest.raises(ValidationError):
        Usage(input_tokens=-1)


# --- ExecutionBudget ------------------------------------------------------------------------

EARLY = datetime(2030, 1, 1, tzinfo=UTC)
LATE = datetime(2031, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (ExecutionBudget(), ExecutionBudget(), ExecutionBudget()),
        (ExecutionBudget(max_steps=5), ExecutionBudget(), ExecutionBudget(max_steps=5)),
        (ExecutionBudget(), ExecutionBudget(max_steps=5), ExecutionBudget(max_steps=5)),
        (ExecutionBudget(max_steps=5), ExecutionBudget(max_steps=3), ExecutionBudget(max_steps=3)),
        (
            ExecutionBudget(max_tokens=100, max_cost_usd=1.0),
            ExecutionBudget(max_tokens=200, max_cost_usd=0.5),
            ExecutionBudget(max_tokens=100, max_cost_usd=0.5),
        ),
        (
            ExecutionBudget(max_seconds=30, deadline=LATE),
            ExecutionBudget(max_seconds=60, deadline=EARLY),
            ExecutionBudget(max_seconds=30, deadline=EARLY),
        ),
    ],
)
def test_a_tightened_budget_keeps_the_stricter_limit_of_each_kind(a, b, expected):
    assert a.tightened(b) == expected
    assert b.tightened(a) == expected


def test_an_empty_budget_is_unlimited():
    assert ExecutionBudget().is_unlimited()
    assert not ExecutionBudget(max_steps=1).is_unlimited()


@pytest.mark.parametrize(
    "limits",
    [
        {"max_steps": 0},
        {"max_tokens": 0},
        {"max_cost_usd": -0.01},
        {"max_seconds": -1},
        {"deadline": datetime(2030, 1, 1)},  # naive: which timezone?
    ],
    ids=["no steps", "no tokens", "negative cost", "negative seconds", "naive deadline"],
)
def test_a_budget_refuses_limits_that_make_no_sense(limits):
    with pytest.raises(ValidationError):
        ExecutionBudget(**limits)
