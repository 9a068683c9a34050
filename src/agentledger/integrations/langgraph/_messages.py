"""How a checkpoint's channel values are kept in ``graph_channel_values``: each as LangGraph's
serializer wrote it. The one place that decides it, so that the channels of messages can be
kept as rows of the conversation and its trace (``message_ids``) without the saver changing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.base import CheckpointMetadata
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...ledger import ChannelValue, CheckpointKey, Ledger


class MessageChannels:
    """Encodes the channel values a checkpoint brings, and decodes them back."""

    def __init__(self, ledger: Ledger, serde: SerializerProtocol) -> None:
        self._ledger = ledger
        self._serde = serde

    def encoded(
        self, key: CheckpointKey, values: Mapping[str, Any], metadata: CheckpointMetadata
    ) -> dict[str, ChannelValue]:
        return {ch: ChannelValue(*self._serde.dumps_typed(v)) for ch, v in values.items()}

    def decoded(self, values: Mapping[str, ChannelValue]) -> dict[str, Any]:
        return {
            ch: self._serde.loads_typed((v.value_type, v.value))
            for ch, v in values.items()
            if v.value_type is not None and v.value is not None
        }

    def copied(self, thread_id: str) -> dict[tuple[str, str, str], ChannelValue]:
        """The values a copy of thread ``thread_id`` stores instead of the source's: none
        while every value is serialized (a copy of a value refers to no row of the source)."""
        return {}
