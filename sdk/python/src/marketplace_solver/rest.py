"""The HTTP routes a solver uses, with the standard library only (run in a thread, so they never block the loop)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .errors import MarketplaceHTTPError
from .protocol import Capability


def _request(base_url: str, method: str, path: str, *, api_key: Optional[str] = None, body: Any = None, timeout: float = 30.0) -> Any:
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(base_url.rstrip("/") + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
            return json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = text
        raise MarketplaceHTTPError(error.code, parsed) from None


class MarketplaceClient:
    """``POST /v1/register``, ``POST /v1/solver/capabilities``, ``GET /v1/solver/market``, ``/stats``, ``/schemas``, ``/v1/balance``."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    async def _call(self, method: str, path: str, body: Any = None, *, authenticated: bool = True) -> Any:
        key = self.api_key if authenticated else None
        return await asyncio.to_thread(_request, self.base_url, method, path, api_key=key, body=body, timeout=self.timeout)

    async def register(self) -> Dict[str, str]:
        """Creates an account; returns ``account_id`` and ``api_key`` (shown once) and uses that key from now on."""
        account: Dict[str, str] = await self._call("POST", "/v1/register", authenticated=False)
        self.api_key = account["api_key"]
        return account

    async def register_capabilities(self, capabilities: Sequence[Capability | Mapping[str, Any]]) -> Dict[str, Any]:
        """Replaces the solver's whole capability list (records left out are removed)."""
        records = [c.to_json() if isinstance(c, Capability) else dict(c) for c in capabilities]
        stored: Dict[str, Any] = await self._call("POST", "/v1/solver/capabilities", records)
        return stored

    async def market(self) -> Dict[str, Any]:
        """The deployment's terms: strong_models, platform_fee_percent, task_types[*].default_max_price_points and .check_price_ceiling_points, timeouts."""
        market: Dict[str, Any] = await self._call("GET", "/v1/solver/market")
        return market

    async def stats(self) -> Dict[str, Any]:
        stats: Dict[str, Any] = await self._call("GET", "/v1/solver/stats")
        return stats

    async def balance(self) -> Dict[str, str]:
        balance: Dict[str, str] = await self._call("GET", "/v1/balance")
        return balance

    async def schemas(self) -> Dict[str, Any]:
        """The JSON Schema of every frame and result type."""
        schemas: Dict[str, Any] = await self._call("GET", "/v1/solver/schemas")
        return schemas


__all__ = ["MarketplaceClient", "MarketplaceHTTPError"]
