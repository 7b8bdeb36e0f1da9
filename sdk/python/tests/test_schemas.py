"""Every frame the SDK sends, and every frame the scripted market sends it, matches the protocol's JSON Schema
(docs/solver-schemas.json, the document GET /v1/solver/schemas serves)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from test_solver import FakeMarket, make_solver, page, task_frame

jsonschema = pytest.importorskip("jsonschema")
from websockets.asyncio.server import ServerConnection  # noqa: E402

from marketplace_solver import Capability, SolverError, Task  # noqa: E402

SCHEMAS = Path(__file__).resolve().parents[3] / "docs" / "solver-schemas.json"


def validator_for(document: Dict[str, Any], ref: str) -> Any:
    schema = {"$schema": document["$schema"], "$defs": document["$defs"], "$ref": ref}
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def document() -> Dict[str, Any]:
    if not SCHEMAS.exists():
        pytest.skip("docs/solver-schemas.json is not beside this SDK")
    return json.loads(SCHEMAS.read_text())


def test_the_schema_document_is_valid_draft_2020_12(document: Dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(document)
    assert set(document["solver_frames"]) == {"accept", "chunk", "result", "error", "drain", "test_task"}


def test_frames_in_both_directions_match_the_schema(document: Dict[str, Any]) -> None:
    sent_by_market: List[Dict[str, Any]] = []

    async def scenario() -> List[Dict[str, Any]]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def handler(task: Task) -> Dict[str, Any]:
            if task.attempt_id.startswith("task_err"):
                raise SolverError("page_not_found", "no such page", retryable=False)
            return await page(task)

        async def send(ws: ServerConnection, frame: Dict[str, Any]) -> None:
            sent_by_market.append(frame)
            await ws.send(json.dumps(frame))

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await send(ws, task_frame("task_ok.a1"))
            await market.next(ws, "result")
            await send(ws, task_frame("task_err.a1"))
            await market.next(ws, "error")
            await send(ws, {"type": "result_rejected", "attempt_id": "task_ok.a1", "issues": [{"type": "missing", "loc": ["result", "url"], "msg": "Field required"}]})
            await send(ws, {"type": "cancel", "attempt_id": "task_x.a1", "reason": "deadline"})
            await send(ws, {"type": "protocol_error", "message": "Malformed frame: attempt_id: Required"})
            done.set_result(None)
            await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            solver = make_solver(market.url, {"proxy_fetch": handler})
            runner = asyncio.ensure_future(solver.run())
            await asyncio.wait_for(done, 10)
            await solver.stop(grace_s=1)
            await asyncio.wait_for(runner, 5)
            return market.received

    received = asyncio.run(scenario())
    assert {frame["type"] for frame in received} >= {"accept", "result", "error", "drain"}
    for frame in received:
        validator_for(document, document["solver_frames"][frame["type"]]["$ref"]).validate(frame)
    for frame in received:
        if frame["type"] == "result":
            validator_for(document, document["results"]["proxy_fetch"]["$ref"]).validate(frame["result"])
    for frame in sent_by_market:
        validator_for(document, document["server_frames"][frame["type"]]["$ref"]).validate(frame)


def test_the_schema_refuses_what_the_server_refuses(document: Dict[str, Any]) -> None:
    error = validator_for(document, document["solver_frames"]["error"]["$ref"])
    assert not error.is_valid({"type": "error", "attempt_id": "a", "error": {"type": "x"}})
    fetch = validator_for(document, document["results"]["proxy_fetch"]["$ref"])
    assert not fetch.is_valid({"url": "u", "final_url": "u", "status_code": 200, "content_type": "text", "content": ""})
    assert fetch.is_valid({"url": "u", "final_url": "u", "status_code": 404, "content_type": "html", "content": "", "extra": 1})


def test_capability_records_match_the_schema_with_and_without_a_country(document: Dict[str, Any]) -> None:
    validator = validator_for(document, document["capability"]["$ref"])
    plain = Capability("proxy_fetch", model_name="fetch", provider_name="tests").to_json()
    located = Capability("page_snapshot", model_name="chromium", provider_name="tests", fulfillment_path="browser", country="DE").to_json()
    assert "country" not in plain and located["country"] == "DE"
    for record in (plain, located):
        validator.validate(record)
    assert list(validator.iter_errors({**located, "country": "de"}))


def test_the_capability_schema_takes_per_token_for_chat_only(document: Dict[str, Any]) -> None:
    validator = validator_for(document, document["capability"]["$ref"])
    chat = Capability("chat_completion", model_name="gpt-4o", provider_name="t", tier="strong", billing_type="per_token").to_json()
    fetch = Capability("proxy_fetch", model_name="fetch", provider_name="t").to_json()
    assert list(validator.iter_errors(chat)) == [] and list(validator.iter_errors(fetch)) == []
    assert list(validator.iter_errors({**fetch, "billing_type": "per_token"})) != []

