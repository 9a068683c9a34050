"""The agent loop: ``Agent`` steps until the continuation criteria say stop, through a driver
(:class:`Driver`), running tools with the :class:`ToolExecutor` and recording each step with a
recorder; subagents are runs spawned through a tool.

This package imports the values, the pure code over them (:mod:`agentledger._core`) and the
recorder interface; never a driver, a provider or the ledger. A driver sees of it only
:mod:`._driver`: the ``Driver`` protocol and the ``StepRequest`` that hands it all it needs.
"""

from ._agent import DEFAULT_FINAL_INSTRUCTION, Agent, AgentConfig, FinalResponse
from ._driver import Driver, StepRequest
from ._engine import Call, Flow, arun_flow, run_flow
from ._executor import TRACEBACK_KEY, ToolExecutor
from ._partials import PartialFlush
from ._streams import AsyncRunStream, RunStream
from ._subagents import (
    SPAWN_TOOL_NAME,
    SpawnArguments,
    SpawnSubagentTool,
    SubagentPolicy,
    SubagentSpec,
)
from ._tracing import ModelCallTrace, RunTrace, ToolCallTrace, Tracer

__all__ = [
    "DEFAULT_FINAL_INSTRUCTION",
    "SPAWN_TOOL_NAME",
    "TRACEBACK_KEY",
    "Agent",
    "AgentConfig",
    "AsyncRunStream",
    "Call",
    "Driver",
    "FinalResponse",
    "Flow",
    "ModelCallTrace",
    "PartialFlush",
    "RunStream",
    "RunTrace",
    "SpawnArguments",
    "SpawnSubagentTool",
    "StepRequest",
    "SubagentPolicy",
    "SubagentSpec",
    "ToolCallTrace",
    "ToolExecutor",
    "Tracer",
    "arun_flow",
    "run_flow",
]
