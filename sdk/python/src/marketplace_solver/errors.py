"""Errors raised by the SDK, and the one a handler raises to fail a task on purpose."""

from __future__ import annotations

from typing import Any, Optional


class SolverError(Exception):
    """Raise from a handler to answer the attempt with an ``error`` frame.

    ``type`` is a short snake_case word the client sees as ``error.solver_error_type`` when the task
    fails for good; ``message`` is a sentence. ``retryable=False`` says no other solver could succeed
    (the page does not exist, the target is refused): the task then fails at once.
    """

    def __init__(self, type: str, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.type = type
        self.message = message
        self.retryable = retryable


class MarketplaceHTTPError(Exception):
    """An HTTP route answered with an error: ``{"error":{type,message}}`` or a 422 ``{"detail":[...]}``."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        error = body.get("error") if isinstance(body, dict) else None
        detail = body.get("detail") if isinstance(body, dict) else None
        self.type: Optional[str] = error.get("type") if isinstance(error, dict) else ("validation_error" if detail is not None else None)
        self.detail = detail
        if isinstance(error, dict):
            text = f"{error.get('type')}: {error.get('message')}"
        elif isinstance(detail, list):
            text = "; ".join(f"{'.'.join(str(part) for part in item.get('loc', []))}: {item.get('msg')}" for item in detail if isinstance(item, dict))
        else:
            text = str(body)
        super().__init__(f"HTTP {status}: {text}")


class ReplacedError(Exception):
    """The server closed the connection with 4001: another connection with the same key took over.

    Reconnecting would evict that other connection in turn, and the two would take turns forever, so
    the solver stops instead. Run one process per solver account.
    """
