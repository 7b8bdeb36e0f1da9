"""The solver: registers its capabilities, holds the WebSocket, runs handlers, reconnects, drains."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from .errors import MarketplaceHTTPError, ReplacedError, SolverError
from .protocol import CLOSE_REPLACED, Capability, Handler, Task, TestResult
from .rest import MarketplaceClient

log = logging.getLogger("marketplace_solver")

# The server accepts frames up to 32 MiB; a test task or a task payload is far smaller.
MAX_FRAME_BYTES = 32 * 1024 * 1024
WELCOME_TIMEOUT_S = 10.0
DRAIN_ACK_TIMEOUT_S = 5.0


def parse_time(text: str) -> datetime:
    """ISO 8601 as the server writes it (``2026-11-21T05:49:03.909Z``), on every Python from 3.10."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def reconnect_delay(failures: int, base: float, maximum: float) -> float:
    """Exponential back-off with jitter, so a fleet of solvers does not reconnect in step."""
    ceiling: float = min(maximum, base * (2 ** min(failures, 16)))
    return ceiling * random.uniform(0.5, 1.0)


class _Attempt:
    def __init__(self, task: Task, socket: ClientConnection) -> None:
        self.task = task
        self.socket = socket
        self.job: Optional[asyncio.Task[None]] = None
        # Set once nothing more may be sent about the attempt (answered, cancelled, or its connection gone).
        self.finished = False


class Solver:
    """A solver agent speaking protocol version 1.

    ``run()`` registers the capabilities, connects, and keeps reconnecting with back-off until ``stop()``.
    It raises when going on is pointless: the key or the capabilities are refused (``MarketplaceHTTPError``),
    or another connection of this solver took over (``ReplacedError``, close code 4001).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        capabilities: Sequence[Capability | Mapping[str, Any]],
        *,
        handlers: Optional[Mapping[str, Handler]] = None,
        register: bool = True,
        reconnect_base_s: float = 0.5,
        reconnect_max_s: float = 30.0,
        ping_interval_s: Optional[float] = 20.0,
        ping_timeout_s: Optional[float] = 20.0,
        on_result_rejected: Optional[Callable[[Dict[str, Any]], Any]] = None,
        on_connected: Optional[Callable[[Dict[str, Any]], Any]] = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = MarketplaceClient(self.base_url, api_key)
        self.capabilities = list(capabilities)
        self.handlers: Dict[str, Handler] = dict(handlers or {})
        self.register = register
        self.reconnect_base_s = reconnect_base_s
        self.reconnect_max_s = reconnect_max_s
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self.on_result_rejected = on_result_rejected
        self.on_connected = on_connected
        self.solver_id: Optional[str] = None
        self.welcome: Optional[Dict[str, Any]] = None
        self.rejected: List[Dict[str, Any]] = []
        self.connections = 0
        self._clock_offset = timedelta(0)
        self._socket: Optional[ClientConnection] = None
        self._attempts: Dict[str, _Attempt] = {}
        self._connected = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._stopped = asyncio.Event()
        self._drained = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tests: "asyncio.Queue[TestResult]" = asyncio.Queue()
        self._test_lock = asyncio.Lock()
        self._background: Set[asyncio.Task[Any]] = set()
        self._started = False

    # ----- configuration -----

    def handler(self, task_type: str) -> Callable[[Handler], Handler]:
        """Decorator: ``@solver.handler("proxy_fetch")`` over ``async def fetch(task) -> dict``."""

        def register(function: Handler) -> Handler:
            self.handlers[task_type] = function
            return function

        return register

    def _limit(self, task_type: str) -> int:
        """Attempts of a type run at once: what its records offer (the server never sends more), at least one."""
        total = 0
        for capability in self.capabilities:
            record = capability.to_json() if isinstance(capability, Capability) else capability
            if record.get("task_type") == task_type:
                total += int(record.get("max_concurrent", 1))
        return max(total, 1)

    # ----- state -----

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def running(self) -> int:
        return len(self._attempts)

    async def wait_connected(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The ``welcome`` frame of the current connection, once there is one."""
        await asyncio.wait_for(self._connected.wait(), timeout)
        assert self.welcome is not None
        return self.welcome

    # ----- main loop -----

    async def run(self) -> None:
        self._started = True
        failures = 0
        try:
            while not self._stop_requested.is_set():
                welcomed = False
                try:
                    if self.register:
                        await self.client.register_capabilities(self.capabilities)
                    welcomed = await self._session()
                except MarketplaceHTTPError as error:
                    # A refused key or capability list stays refused: retrying changes nothing.
                    if error.status < 500 and error.status != 429:
                        raise
                    log.warning("the marketplace answered %s; retrying", error)
                except InvalidStatus as error:
                    status = error.response.status_code
                    # 429: too many connection attempts from this address; the next may pass.
                    if status < 500 and status != 429:
                        body: Any = error.response.body.decode(errors="replace") if error.response.body else ""
                        try:
                            body = json.loads(body)
                        except ValueError:
                            pass
                        raise MarketplaceHTTPError(status, body) from None
                    log.warning("WebSocket upgrade refused with %s; retrying", status)
                except (OSError, InvalidHandshake, asyncio.TimeoutError, ConnectionClosed) as error:
                    log.warning("could not reach the marketplace: %s", error)
                if self._stop_requested.is_set():
                    break
                failures = 0 if welcomed else failures + 1
                delay = reconnect_delay(failures, self.reconnect_base_s, self.reconnect_max_s)
                log.info("reconnecting in %.1f s", delay)
                try:
                    await asyncio.wait_for(self._stop_requested.wait(), delay)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._stopped.set()

    async def _session(self) -> bool:
        """One connection, from upgrade to close. True when it was welcomed."""
        ws_url = self.base_url.replace("http", "ws", 1) + "/v1/solver/connect"
        async with connect(
            ws_url,
            additional_headers={"Authorization": f"Bearer {self.client.api_key}"},
            max_size=MAX_FRAME_BYTES,
            # websockets answers the server's pings by itself; these are our own pings, which tell us
            # when the link is dead (the server answers them too).
            ping_interval=self.ping_interval_s,
            ping_timeout=self.ping_timeout_s,
            open_timeout=WELCOME_TIMEOUT_S,
        ) as socket:
            first = json.loads(await asyncio.wait_for(socket.recv(), WELCOME_TIMEOUT_S))
            if first.get("type") != "welcome":
                raise InvalidHandshake(f"expected a welcome frame, got {first.get('type')!r}")
            self._on_welcome(socket, first)
            if self._stop_requested.is_set():
                # stop() ran while this connection was being made: it never saw this socket.
                await socket.close(1000, "solver shutting down")
            try:
                async for message in socket:
                    if isinstance(message, bytes):
                        log.warning("ignoring a binary frame")
                        continue
                    self._on_frame(socket, message)
            except ConnectionClosed:
                pass
            finally:
                self._on_closed(socket)
        code = socket.close_code
        log.info("disconnected (code %s, %s)", code, socket.close_reason or "no reason")
        if code == CLOSE_REPLACED:
            raise ReplacedError("another connection of this solver took over (close code 4001); not reconnecting")
        return True

    def _on_welcome(self, socket: ClientConnection, welcome: Dict[str, Any]) -> None:
        self._socket = socket
        self.welcome = welcome
        self.solver_id = welcome.get("solver_id")
        self.connections += 1
        self._drained.clear()
        server_time = welcome.get("server_time")
        self._clock_offset = parse_time(server_time) - datetime.now(timezone.utc) if server_time else timedelta(0)
        self._connected.set()
        log.info("connected as %s (heartbeat every %s ms)", self.solver_id, welcome.get("heartbeat_interval_ms"))
        if self.on_connected is not None:
            # Called with each connection's welcome; a coroutine it returns runs beside the connection.
            outcome = self.on_connected(welcome)
            if asyncio.iscoroutine(outcome):
                self._spawn(outcome)

    def _on_closed(self, socket: ClientConnection) -> None:
        if self._socket is socket:
            self._socket = None
            self._connected.clear()
        # The server reassigns the attempts of a closed connection: finishing them is wasted work.
        for attempt in list(self._attempts.values()):
            if attempt.socket is socket:
                attempt.finished = True
                if attempt.job is not None:
                    attempt.job.cancel()

    # ----- frames -----

    def _on_frame(self, socket: ClientConnection, text: str) -> None:
        try:
            frame = json.loads(text)
        except ValueError:
            log.warning("ignoring a frame that is not JSON")
            return
        kind = frame.get("type") if isinstance(frame, dict) else None
        if kind == "task":
            self._on_task(socket, frame)
        elif kind == "cancel":
            attempt = self._attempts.get(frame.get("attempt_id", ""))
            if attempt is not None and attempt.socket is socket:
                log.info("attempt %s cancelled: %s", attempt.task.attempt_id, frame.get("reason"))
                attempt.finished = True
                attempt.task.cancelled.set()
                if attempt.job is not None:
                    attempt.job.cancel()
        elif kind == "result_rejected":
            self.rejected.append(frame)
            log.error("result of %s rejected: %s", frame.get("attempt_id"), frame.get("issues"))
            if self.on_result_rejected is not None:
                self.on_result_rejected(frame)
        elif kind == "test_result":
            self._tests.put_nowait(frame)
        elif kind == "draining":
            self._drained.set()
        elif kind == "protocol_error":
            log.warning("the marketplace reported a protocol error: %s", frame.get("message"))
        else:
            log.debug("ignoring a frame of type %r", kind)

    def _on_task(self, socket: ClientConnection, frame: Dict[str, Any]) -> None:
        attempt_id = frame["attempt_id"]
        task_type = frame["task_type"]
        handler = self.handlers.get(task_type)
        if self._stop_requested.is_set():
            return self._decline(socket, attempt_id, "shutting_down", "this solver is shutting down")
        if handler is None:
            return self._decline(socket, attempt_id, "unsupported_task_type", f"this solver does not do {task_type} tasks")
        if sum(1 for a in self._attempts.values() if a.task.task_type == task_type) >= self._limit(task_type):
            return self._decline(socket, attempt_id, "busy", f"this solver already runs {self._limit(task_type)} {task_type} tasks")
        task = Task(
            attempt_id=attempt_id,
            task_id=frame["task_id"],
            task_type=task_type,
            payload=frame.get("payload") or {},
            # Our clock may differ from the server's: the deadline is moved onto ours.
            deadline=parse_time(frame["deadline"]) - self._clock_offset,
            test=bool(frame.get("test")),
        )
        attempt = _Attempt(task, socket)
        task._send_chunk = lambda delta: self._send_for(attempt, {"type": "chunk", "attempt_id": attempt_id, "delta": delta}, final=False)
        self._attempts[attempt_id] = attempt
        self._idle.clear()
        attempt.job = asyncio.ensure_future(self._run_attempt(attempt, handler))

    def _decline(self, socket: ClientConnection, attempt_id: str, type: str, message: str) -> None:
        """No accept, an error at once: the server offers the task to another solver."""
        log.info("declining %s: %s", attempt_id, message)
        self._spawn(self._send(socket, {"type": "error", "attempt_id": attempt_id, "error": {"type": type, "message": message}, "retryable": True}))

    async def _run_attempt(self, attempt: _Attempt, handler: Handler) -> None:
        task = attempt.task
        try:
            # Sent from here, so it always goes before the handler's answer.
            await self._send(attempt.socket, {"type": "accept", "attempt_id": task.attempt_id})
            result = await asyncio.wait_for(handler(task), max(task.seconds_left(), 0.001))
            await self._send_for(attempt, {"type": "result", "attempt_id": task.attempt_id, "result": result})
        except asyncio.CancelledError:
            pass  # cancelled by the server, or the connection closed: nothing more is sent
        except asyncio.TimeoutError:
            # Past the attempt deadline the server has moved on (it sends `cancel`); an answer would be ignored.
            log.warning("%s %s ran past its deadline", task.task_type, task.attempt_id)
        except SolverError as error:
            await self._send_for(attempt, {"type": "error", "attempt_id": task.attempt_id, "error": {"type": error.type, "message": error.message}, "retryable": error.retryable})
        except Exception as error:  # noqa: BLE001 - a handler's bug becomes an error frame, not a dead solver
            log.exception("handler for %s failed", task.task_type)
            await self._send_for(attempt, {"type": "error", "attempt_id": task.attempt_id, "error": {"type": "internal_error", "message": f"{type(error).__name__}: {error}"}, "retryable": True})
        finally:
            attempt.finished = True
            self._attempts.pop(task.attempt_id, None)
            if not self._attempts:
                self._idle.set()

    async def _send_for(self, attempt: _Attempt, frame: Dict[str, Any], final: bool = True) -> None:
        if attempt.finished:
            return
        if final:
            attempt.finished = True
        await self._send(attempt.socket, frame)

    async def _send(self, socket: Optional[ClientConnection], frame: Dict[str, Any]) -> None:
        if socket is None:
            return
        try:
            await socket.send(json.dumps(frame))
        except ConnectionClosed:
            log.debug("connection closed; %s frame dropped", frame.get("type"))

    def _spawn(self, coroutine: Any) -> None:
        job = asyncio.ensure_future(coroutine)
        self._background.add(job)
        job.add_done_callback(self._background.discard)

    # ----- test mode and shutdown -----

    async def test_task(self, task_type: str, payload: Optional[Dict[str, Any]] = None, timeout: float = 60.0) -> TestResult:
        """Asks the server for a synthetic task of ``task_type`` (test mode), runs it through this solver's
        own handler like any task, and returns the server's verdict (``passed``, ``outcome``, ``issues``)."""
        async with self._test_lock:
            await self.wait_connected(timeout)
            while not self._tests.empty():
                self._tests.get_nowait()
            frame: Dict[str, Any] = {"type": "test_task", "task_type": task_type}
            if payload is not None:
                frame["payload"] = payload
            await self._send(self._socket, frame)
            return await asyncio.wait_for(self._tests.get(), timeout)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Clean shutdown: ``drain`` (the server offers nothing new), let running attempts finish within
        ``grace_s``, answer the rest with a retryable ``shutting_down`` error, then close with 1000."""
        self._stop_requested.set()
        socket = self._socket
        if socket is not None:
            await self._send(socket, {"type": "drain"})
            try:
                await asyncio.wait_for(self._drained.wait(), DRAIN_ACK_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.warning("no draining answer from the marketplace")
        try:
            await asyncio.wait_for(self._idle.wait(), grace_s)
        except asyncio.TimeoutError:
            pass
        for attempt in list(self._attempts.values()):
            await self._send_for(attempt, {"type": "error", "attempt_id": attempt.task.attempt_id, "error": {"type": "shutting_down", "message": "this solver shut down before the task finished"}, "retryable": True})
            if attempt.job is not None:
                attempt.job.cancel()
        if socket is not None:
            await socket.close(1000, "solver shutting down")
        if not self._started:
            return
        try:
            await asyncio.wait_for(self._stopped.wait(), 5.0)
        except asyncio.TimeoutError:
            pass
