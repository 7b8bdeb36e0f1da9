"""The SDK against a scripted marketplace (a real WebSocket server in this process)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from typing import Any, Awaitable, Callable, Dict, List

import pytest
from websockets.asyncio.server import ServerConnection, serve

from marketplace_solver import Capability, MarketplaceHTTPError, ReplacedError, Solver, SolverError, Task, reconnect_delay

Script = Callable[[ServerConnection, "FakeMarket"], Awaitable[None]]


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_frame(attempt: str, task_type: str = "proxy_fetch", seconds: float = 10, **extra: Any) -> Dict[str, Any]:
    deadline = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return {"type": "task", "attempt_id": attempt, "task_id": attempt.split(".")[0], "task_type": task_type, "payload": {"url": "https://example.com/"}, "deadline": iso(deadline), **extra}


class FakeMarket:
    """Speaks the server side of protocol v1 as each test scripts it; records what the solver sent."""

    def __init__(self, script: Script, *, refuse: int = 0, refusals: int = 0, server_time: datetime | None = None) -> None:
        self.script = script
        self.refuse = refuse
        # Refuse only the first ``refusals`` upgrades (0: all of them).
        self.refusals = refusals
        self.server_time = server_time
        self.received: List[Dict[str, Any]] = []
        self.connections = 0
        self.authorization: List[str] = []

    async def __aenter__(self) -> "FakeMarket":
        self.server = await serve(self._handle, "127.0.0.1", 0, process_request=self._check)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.server.close()
        await self.server.wait_closed()

    def _check(self, connection: ServerConnection, request: Any) -> Any:
        self.authorization.append(request.headers.get("Authorization", ""))
        if self.refuse and (self.refusals == 0 or len(self.authorization) <= self.refusals):
            error_type = "rate_limited" if self.refuse == 429 else "invalid_api_key"
            response = connection.respond(HTTPStatus(self.refuse), json.dumps({"error": {"type": error_type, "message": "Refused by the test."}}) + "\n")
            return response
        return None

    async def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        self.ws = ws
        welcome: Dict[str, Any] = {"type": "welcome", "protocol": 1, "solver_id": "acct_test", "heartbeat_interval_ms": 1000}
        if self.server_time is not None:
            welcome["server_time"] = iso(self.server_time)
        await ws.send(json.dumps(welcome))
        await self.script(ws, self)

    async def serve_rest(self, ws: ServerConnection) -> None:
        """Reads frames until the solver closes, answering ``drain`` as the server does."""
        try:
            while True:
                frame = json.loads(await ws.recv())
                self.received.append(frame)
                if frame["type"] == "drain":
                    await ws.send(json.dumps({"type": "draining", "running_attempts": 0}))
        except Exception:
            return

    async def next(self, ws: ServerConnection, kind: str | None = None, timeout: float = 5) -> Dict[str, Any]:
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
            self.received.append(frame)
            if kind is None or frame["type"] == kind:
                return frame


def make_solver(url: str, handlers: Dict[str, Any], max_concurrent: int = 2, **options: Any) -> Solver:
    capability = Capability("proxy_fetch", model_name="fetch", provider_name="tests", max_concurrent=max_concurrent)
    return Solver(url, "tmk_test", [capability], handlers=handlers, register=False, reconnect_base_s=0.05, reconnect_max_s=0.2, **options)


async def page(task: Task) -> Dict[str, Any]:
    return {"url": task.payload["url"], "final_url": task.payload["url"], "status_code": 200, "content_type": "html", "content": "<p>hi</p>", "title": None}


async def run_until(solver: Solver, done: "asyncio.Future[Any]", timeout: float = 10) -> Any:
    runner = asyncio.ensure_future(solver.run())
    try:
        return await asyncio.wait_for(done, timeout)
    finally:
        await solver.stop(grace_s=1)
        await asyncio.wait_for(runner, 5)


def test_accepts_a_task_runs_its_handler_and_sends_the_result_with_the_bearer_key() -> None:
    async def scenario() -> None:
        done: asyncio.Future[Dict[str, Any]] = asyncio.get_running_loop().create_future()

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await ws.send(json.dumps(task_frame("task_a.a1")))
            assert (await market.next(ws)) == {"type": "accept", "attempt_id": "task_a.a1"}
            done.set_result(await market.next(ws))
            await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            solver = make_solver(market.url, {"proxy_fetch": page})
            result = await run_until(solver, done)
            assert result["type"] == "result" and result["result"]["status_code"] == 200
            assert market.authorization[0] == "Bearer tmk_test"
            assert solver.solver_id == "acct_test"

    asyncio.run(scenario())


def test_answers_the_server_pings_while_a_handler_runs() -> None:
    async def scenario() -> None:
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def slow(task: Task) -> Dict[str, Any]:
            await asyncio.sleep(1.5)
            return await page(task)

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await ws.send(json.dumps(task_frame("task_p.a1")))
            await market.next(ws, "accept")
            latency = await asyncio.wait_for(await ws.ping(), 1)
            done.set_result(latency)
            await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            latency = await run_until(make_solver(market.url, {"proxy_fetch": slow}), done)
            assert latency < 1

    asyncio.run(scenario())


def test_declines_beyond_its_limit_and_unknown_types_without_accepting() -> None:
    async def scenario() -> None:
        done: asyncio.Future[List[Dict[str, Any]]] = asyncio.get_running_loop().create_future()
        release = asyncio.Event()

        async def held(task: Task) -> Dict[str, Any]:
            await release.wait()
            return await page(task)

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await ws.send(json.dumps(task_frame("task_1.a1")))
            await market.next(ws, "accept")
            await ws.send(json.dumps(task_frame("task_2.a1")))
            busy = await market.next(ws)
            await ws.send(json.dumps(task_frame("task_3.a1", task_type="screenshot")))
            unsupported = await market.next(ws)
            release.set()
            await market.next(ws, "result")
            done.set_result([busy, unsupported])
            await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            busy, unsupported = await run_until(make_solver(market.url, {"proxy_fetch": held}, max_concurrent=1), done)
            assert busy == {"type": "error", "attempt_id": "task_2.a1", "error": {"type": "busy", "message": "this solver already runs 1 proxy_fetch tasks"}, "retryable": True}
            assert unsupported["error"]["type"] == "unsupported_task_type" and unsupported["attempt_id"] == "task_3.a1"

    asyncio.run(scenario())


def test_a_solver_error_keeps_its_type_and_a_crash_becomes_internal_error() -> None:
    async def scenario() -> None:
        done: asyncio.Future[List[Dict[str, Any]]] = asyncio.get_running_loop().create_future()

        async def failing(task: Task) -> Dict[str, Any]:
            if task.attempt_id.startswith("task_gone"):
                raise SolverError("page_not_found", "the page does not exist", retryable=False)
            raise ValueError("bug")

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await ws.send(json.dumps(task_frame("task_gone.a1")))
            await ws.send(json.dumps(task_frame("task_bug.a1")))
            errors = [await market.next(ws, "error"), await market.next(ws, "error")]
            done.set_result(sorted(errors, key=lambda frame: frame["attempt_id"]))
            await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            bug, gone = await run_until(make_solver(market.url, {"proxy_fetch": failing}), done)
            assert gone == {"type": "error", "attempt_id": "task_gone.a1", "error": {"type": "page_not_found", "message": "the page does not exist"}, "retryable": False}
            assert bug["error"] == {"type": "internal_error", "message": "ValueError: bug"} and bug["retryable"] is True

    asyncio.run(scenario())


def test_cancel_stops_the_handler_and_nothing_more_is_sent_about_it() -> None:
    async def scenario() -> None:
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        cancelled = asyncio.Event()

        async def endless(task: Task) -> Dict[str, Any]:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return await page(task)

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await ws.send(json.dumps(task_frame("task_c.a1")))
            await market.next(ws, "accept")
            await ws.send(json.dumps({"type": "cancel", "attempt_id": "task_c.a1", "reason": "cancelled"}))
            await asyncio.wait_for(cancelled.wait(), 2)
            try:
                extra = await market.next(ws, timeout=0.5)
            except asyncio.TimeoutError:
                extra = None
            done.set_result(extra is None)
            await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            assert await run_until(make_solver(market.url, {"proxy_fetch": endless}), done)

    asyncio.run(scenario())


def test_close_4001_stops_the_solver_instead_of_reconnecting() -> None:
    async def scenario() -> None:
        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await ws.close(4001, "replaced by a newer connection")

        async with FakeMarket(script) as market:
            solver = make_solver(market.url, {"proxy_fetch": page})
            with pytest.raises(ReplacedError):
                await asyncio.wait_for(solver.run(), 5)
            await asyncio.sleep(0.3)
            assert market.connections == 1

    asyncio.run(scenario())


def test_other_closes_and_drops_reconnect_with_back_off() -> None:
    async def scenario() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            if market.connections == 1:
                await ws.close(1001, "server shutting down")
            elif market.connections == 2:
                ws.transport.abort()  # no closing handshake, as after a missed heartbeat
            else:
                done.set_result(None)
                await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            solver = make_solver(market.url, {"proxy_fetch": page})
            await run_until(solver, done)
            assert market.connections == 3 and solver.connections == 3

    asyncio.run(scenario())


def test_a_refused_key_is_an_error_not_a_reconnect_loop() -> None:
    async def scenario() -> None:
        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await market.serve_rest(ws)

        async with FakeMarket(script, refuse=401) as market:
            with pytest.raises(MarketplaceHTTPError) as refused:
                await asyncio.wait_for(make_solver(market.url, {"proxy_fetch": page}).run(), 5)
            assert refused.value.status == 401 and refused.value.type == "invalid_api_key"

    asyncio.run(scenario())


def test_an_upgrade_refused_with_429_is_retried_with_back_off() -> None:
    async def scenario() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            done.set_result(None)
            await market.serve_rest(ws)

        async with FakeMarket(script, refuse=429, refusals=2) as market:
            await run_until(make_solver(market.url, {"proxy_fetch": page}), done)
            assert len(market.authorization) == 3 and market.connections == 1

    asyncio.run(scenario())


def test_stop_drains_lets_the_running_attempt_finish_then_closes_with_1000() -> None:
    async def scenario() -> None:
        order: List[str] = []

        async def slow(task: Task) -> Dict[str, Any]:
            await asyncio.sleep(0.5)
            return await page(task)

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await ws.send(json.dumps(task_frame("task_d.a1")))
            await market.next(ws, "accept")
            order.append((await market.next(ws))["type"])
            await ws.send(json.dumps({"type": "draining", "running_attempts": 1}))
            order.append((await market.next(ws))["type"])
            try:
                await market.next(ws)
            except Exception:  # the close
                order.append(f"closed {ws.close_code}")

        async with FakeMarket(script) as market:
            solver = make_solver(market.url, {"proxy_fetch": slow})
            runner = asyncio.ensure_future(solver.run())
            await solver.wait_connected(5)
            while solver.running == 0:
                await asyncio.sleep(0.01)
            await solver.stop(grace_s=5)
            await asyncio.wait_for(runner, 5)
            await asyncio.sleep(0.1)
            assert order == ["drain", "result", "closed 1000"]
            assert market.connections == 1

    asyncio.run(scenario())


def test_test_mode_runs_the_synthetic_task_through_the_handler_and_returns_the_verdict() -> None:
    async def scenario() -> None:
        seen: List[Task] = []

        async def handler(task: Task) -> Dict[str, Any]:
            seen.append(task)
            return await page(task)

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            request = await market.next(ws)
            assert request == {"type": "test_task", "task_type": "proxy_fetch"}
            await ws.send(json.dumps(task_frame("test_x.a1", test=True)))
            await market.next(ws, "result")
            await ws.send(json.dumps({"type": "test_result", "attempt_id": "test_x.a1", "task_type": "proxy_fetch", "passed": True, "outcome": "passed"}))
            await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            solver = make_solver(market.url, {"proxy_fetch": handler})
            runner = asyncio.ensure_future(solver.run())
            verdict = await solver.test_task("proxy_fetch", timeout=5)
            await solver.stop(grace_s=1)
            await asyncio.wait_for(runner, 5)
            assert verdict["passed"] is True and verdict["outcome"] == "passed"
            assert seen[0].test is True

    asyncio.run(scenario())


def test_result_rejected_reaches_the_callback() -> None:
    async def scenario() -> None:
        rejected: asyncio.Future[Dict[str, Any]] = asyncio.get_running_loop().create_future()

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await ws.send(json.dumps({"type": "result_rejected", "attempt_id": "task_r.a1", "issues": [{"type": "missing", "loc": ["result", "url"], "msg": "Field required"}]}))
            await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            solver = make_solver(market.url, {"proxy_fetch": page}, on_result_rejected=rejected.set_result)
            frame = await run_until(solver, rejected)
            assert frame["issues"][0]["loc"] == ["result", "url"]

    asyncio.run(scenario())


def test_deadlines_are_moved_onto_the_local_clock_by_the_welcome_server_time() -> None:
    async def scenario() -> None:
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        server_now = datetime.now(timezone.utc) + timedelta(hours=1)

        async def handler(task: Task) -> Dict[str, Any]:
            done.set_result(task.seconds_left())
            return await page(task)

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            frame = task_frame("task_t.a1")
            frame["deadline"] = iso(server_now + timedelta(seconds=5))
            await ws.send(json.dumps(frame))
            await market.serve_rest(ws)

        async with FakeMarket(script, server_time=server_now) as market:
            left = await run_until(make_solver(market.url, {"proxy_fetch": handler}), done)
            assert 3 < left <= 5.5

    asyncio.run(scenario())


def test_reconnect_delay_doubles_with_jitter_up_to_the_maximum() -> None:
    for failures in range(0, 12):
        delay = reconnect_delay(failures, 0.5, 30)
        assert min(30, 0.5 * 2**failures) * 0.5 <= delay <= min(30, 0.5 * 2**failures)


def test_chat_chunks_go_out_in_order_before_the_result_and_on_connected_sees_each_welcome() -> None:
    async def scenario() -> None:
        done: asyncio.Future[List[Dict[str, Any]]] = asyncio.get_running_loop().create_future()
        welcomes: List[Dict[str, Any]] = []

        async def chat(task: Task) -> Dict[str, Any]:
            for word in ("Hel", "lo"):
                await task.send_chunk({"content": word})
            return {"finish_reason": "stop", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}

        async def script(ws: ServerConnection, market: FakeMarket) -> None:
            await ws.send(json.dumps(task_frame("chat_a.a1", task_type="chat_completion")))
            frames = [await market.next(ws) for _ in range(4)]
            done.set_result(frames)
            await market.serve_rest(ws)

        async with FakeMarket(script) as market:
            capability = Capability("chat_completion", model_name="gpt-4o", provider_name="tests", tier="strong", billing_type="per_token", fulfillment_path="provider_api")
            solver = Solver(market.url, "tmk_test", [capability], handlers={"chat_completion": chat}, register=False, on_connected=welcomes.append)
            frames = await run_until(solver, done)
            assert [frame["type"] for frame in frames] == ["accept", "chunk", "chunk", "result"]
            assert [frame["delta"]["content"] for frame in frames[1:3]] == ["Hel", "lo"]
            assert welcomes and welcomes[0]["solver_id"] == "acct_test"

    asyncio.run(scenario())


def test_a_per_token_capability_is_refused_for_a_web_task_type_and_kept_for_chat() -> None:
    with pytest.raises(ValueError, match="billed per_request"):
        Capability("proxy_fetch", model_name="fetch", provider_name="tests", billing_type="per_token", marginal_cost="100")
    chat = Capability("chat_completion", model_name="gpt-4o", provider_name="tests", tier="strong", billing_type="per_token")
    assert chat.to_json()["billing_type"] == "per_token"
