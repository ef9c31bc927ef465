"""The agent: a loop over record, retention, lowering and a provider, with tools.

Example:
    >>> # from visus.agent import build_agent
    >>> # agent = build_agent("reference", roots=["."])
    >>> # result = await agent.run_turn("demo", "What is in grid.png?")
"""

from __future__ import annotations

from visus.agent.loop import (
    Agent,
    DeltaCallback,
    PastedImage,
    StatusCallback,
    ToolCallback,
    TurnResult,
)
from visus.agent.mcp_client import McpMounts, McpServerSpec
from visus.agent.runtime import build_agent, ensure_reference_server
from visus.agent.tools import (
    OutboundImage,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    perception_parts,
)

__all__ = [
    "Agent",
    "DeltaCallback",
    "McpMounts",
    "McpServerSpec",
    "OutboundImage",
    "PastedImage",
    "StatusCallback",
    "Tool",
    "ToolCallback",
    "ToolContext",
    "ToolOutcome",
    "ToolRegistry",
    "TurnResult",
    "build_agent",
    "ensure_reference_server",
    "perception_parts",
]
