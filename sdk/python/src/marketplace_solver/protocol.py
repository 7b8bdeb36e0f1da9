"""Protocol values and the shapes a solver handles."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Awaitable, Callable, Dict, List, Literal, Optional, Tuple, TypedDict, Union

TaskType = Literal["proxy_fetch", "web_search", "screenshot", "page_snapshot", "chat_completion"]
TASK_TYPES: Tuple[str, ...] = ("proxy_fetch", "web_search", "screenshot", "page_snapshot", "chat_completion")
# Only chat is billed by tokens (the server counts them); every other task type is billed per request.
TOKEN_BILLED_TASK_TYPES: Tuple[str, ...] = ("chat_completion",)
PROTOCOL_VERSION = 1

# Close codes the server uses (docs/solver-protocol.md, "Close codes").
CLOSE_REPLACED = 4001
CLOSE_GOING_AWAY = 1001
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011


@dataclass
class Capability:
    """One record of ``POST /v1/solver/capabilities``. Prices are decimal strings, so nothing is lost to floats.

    ``per_token`` (chat): ``marginal_cost`` is points per 1000 tokens, prompt and completion alike;
    ``prompt_cost`` and ``completion_cost`` set the two rates apart (each defaults to ``marginal_cost``).
    A chat goes to the record with the lowest estimated price for it: ``min_price_points`` + the rates
    × the prompt's tokens and ``max_tokens`` (docs/solver-protocol.md, "Prices and fees").
    """

    task_type: TaskType
    model_name: str
    provider_name: str
    min_price_points: str = "1"
    marginal_cost: str = "0"
    max_concurrent: int = 4
    tier: Literal["strong", "standard", "basic"] = "standard"
    billing_type: Literal["per_request", "per_token"] = "per_request"
    fulfillment_path: Literal["http", "browser", "search_api", "local_model", "provider_api"] = "http"
    prompt_cost: Optional[str] = None
    completion_cost: Optional[str] = None
    #: The country this capability fetches from (ISO 3166-1 alpha-2, upper case, e.g. "DE"), as the solver
    #: declares it; tasks that ask for a country (Firecrawl's location.country) go only to capabilities declaring it.
    country: Optional[str] = None

    def __post_init__(self) -> None:
        if self.billing_type == "per_token" and self.task_type not in TOKEN_BILLED_TASK_TYPES:
            raise ValueError(
                f'task_type "{self.task_type}" is billed per_request; only {", ".join(TOKEN_BILLED_TASK_TYPES)} may be billed per_token'
            )

    def to_json(self) -> Dict[str, Any]:
        rates = {
            name: value for name, value in (("prompt_cost", self.prompt_cost), ("completion_cost", self.completion_cost)) if value is not None
        }
        record: Dict[str, Any] = {
            "task_type": self.task_type,
            "tier": self.tier,
            "billing_type": self.billing_type,
            "fulfillment_path": self.fulfillment_path,
            "provider_name": self.provider_name,
            "model_name": self.model_name,
            "marginal_cost": self.marginal_cost,
            "min_price_points": self.min_price_points,
            "max_concurrent": self.max_concurrent,
            **rates,
        }
        if self.country is not None:
            record["country"] = self.country
        return record


class ResultIssue(TypedDict, total=False):
    type: str
    loc: List[Union[str, int]]
    msg: str
    ctx: Dict[str, Any]


class TestResult(TypedDict, total=False):
    """The server's ``test_result`` frame: ``passed`` is true when the result matched its schema."""

    type: str
    attempt_id: Optional[str]
    task_type: str
    passed: bool
    outcome: str
    issues: List[ResultIssue]
    error: Dict[str, str]
    retryable: bool
    chunks: int


@dataclass
class Task:
    """One attempt the server sent (a ``task`` frame), as a handler sees it."""

    attempt_id: str
    task_id: str
    task_type: str
    payload: Dict[str, Any]
    deadline: datetime
    """The attempt deadline, already corrected for the difference between the server's clock and ours."""
    test: bool = False
    """True for a test task this solver asked for (test mode): nothing is paid or counted."""
    _send_chunk: Optional[Callable[[Dict[str, Any]], Awaitable[None]]] = field(default=None, repr=False)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def seconds_left(self) -> float:
        return (self.deadline - datetime.now(self.deadline.tzinfo)).total_seconds()

    async def send_chunk(self, delta: Dict[str, Any]) -> None:
        """Chat only: streams an OpenAI delta (``{"content": "..."}``) before the handler returns its result."""
        if self._send_chunk is not None:
            await self._send_chunk(delta)


Handler = Callable[[Task], Awaitable[Dict[str, Any]]]
