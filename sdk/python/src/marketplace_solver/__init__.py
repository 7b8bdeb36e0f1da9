"""Solver SDK for the task marketplace: protocol version 1 over WebSocket, asyncio, typed.

    solver = Solver(url, api_key, [Capability("proxy_fetch", model_name="fetch", provider_name="me")])

    @solver.handler("proxy_fetch")
    async def fetch(task: Task) -> dict: ...

    await solver.run()      # until solver.stop()
"""

from .errors import MarketplaceHTTPError, ReplacedError, SolverError
from .protocol import PROTOCOL_VERSION, TASK_TYPES, Capability, Handler, ResultIssue, Task, TaskType, TestResult
from .rest import MarketplaceClient
from .solver import Solver, reconnect_delay

__all__ = [
    "PROTOCOL_VERSION",
    "TASK_TYPES",
    "Capability",
    "Handler",
    "MarketplaceClient",
    "MarketplaceHTTPError",
    "ReplacedError",
    "ResultIssue",
    "Solver",
    "SolverError",
    "Task",
    "TaskType",
    "TestResult",
    "reconnect_delay",
]
__version__ = "0.1.0"
