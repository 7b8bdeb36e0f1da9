#!/usr/bin/env python3
"""An example solver: plain HTTP fetches and a search over a few built-in pages.

    pip install ./sdk/python
    python sdk/python/examples/example_solver.py --url http://127.0.0.1:3000 --register --self-test

It registers (or uses --api-key / SOLVER_API_KEY), offers proxy_fetch and web_search, and prints one
JSON line per event on stdout (registered, connected, test_result, stopped, replaced); logs go to
stderr. Ctrl-C or SIGTERM drains: the marketplace stops offering work, running tasks finish, then it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from typing import Any, Dict, List, Optional

from marketplace_solver import Capability, MarketplaceClient, MarketplaceHTTPError, ReplacedError, Solver, SolverError, Task

MAX_BODY_BYTES = 5 * 1024 * 1024

# The search "index": a stand-in for a real search backend (SearXNG, an API), small enough to read.
PAGES = [
    {"title": "Running a solver", "url": "https://docs.example.com/solvers", "text": "A solver is an account that does tasks for points over a WebSocket."},
    {"title": "Points and fees", "url": "https://docs.example.com/points", "text": "Each settled task pays its price less the platform fee to the solver."},
    {"title": "Draining a solver", "url": "https://docs.example.com/drain", "text": "Send drain before you stop: running tasks finish, no new ones come."},
    {"title": "Lighthouse keeping", "url": "https://example.org/lighthouse", "text": "The lighthouse keeper trims the lamp wick every evening."},
]


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


class _TextAndTitle(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: List[str] = []
        self.title: Optional[str] = None
        self._in_title = False
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in ("script", "style"):
            self._skip += 1
        elif tag in ("p", "br", "li", "h1", "h2", "h3", "div"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title = (self.title or "") + data
        elif not self._skip:
            self.parts.append(data)


def check_target(url: str, allow_private: bool) -> None:
    """Clients choose URLs: never let one reach this machine's own network."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SolverError("unsupported_url", f"only http(s) URLs are fetched, not {url!r}", retryable=False)
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(parts.hostname, parts.port or 80)}
    except socket.gaierror:
        raise SolverError("host_not_found", f"the host {parts.hostname} does not resolve", retryable=False) from None
    if not allow_private:
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            if not ip.is_global:
                raise SolverError("target_refused", f"{parts.hostname} resolves to a non-public address", retryable=False)


def fetch_blocking(url: str, timeout: float, allow_private: bool) -> Dict[str, Any]:
    check_target(url, allow_private)
    request = urllib.request.Request(url, headers={"User-Agent": "marketplace-example-solver/0.1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, final_url, body, charset = response.status, response.geturl(), response.read(MAX_BODY_BYTES), response.headers.get_content_charset()
    except urllib.error.HTTPError as error:
        # The target answered: a 404 page is a result, not an error.
        status, final_url, body, charset = error.code, error.geturl(), error.read(MAX_BODY_BYTES), error.headers.get_content_charset()
    except (urllib.error.URLError, OSError) as error:
        raise SolverError("fetch_failed", f"could not fetch {url}: {getattr(error, 'reason', error)}") from None
    return {"status_code": status, "final_url": final_url, "text": body.decode(charset or "utf-8", errors="replace")}


def build_solver(args: argparse.Namespace, api_key: str) -> Solver:
    capabilities = [
        Capability("proxy_fetch", model_name="urllib", provider_name="example", min_price_points=args.price, max_concurrent=args.max_concurrent),
        Capability("web_search", model_name="builtin-pages", provider_name="example", fulfillment_path="search_api", min_price_points=args.price, max_concurrent=args.max_concurrent),
    ]
    solver = Solver(args.url, api_key, capabilities, reconnect_base_s=0.5, reconnect_max_s=10)

    @solver.handler("proxy_fetch")
    async def proxy_fetch(task: Task) -> Dict[str, Any]:
        url = task.payload["url"]
        timeout = max(0.5, min(task.seconds_left(), float(task.payload.get("timeout") or 30)))
        # urllib blocks: run it in a thread so the event loop keeps answering heartbeats.
        page = await asyncio.to_thread(fetch_blocking, url, timeout, args.allow_private_networks)
        parsed = _TextAndTitle()
        parsed.feed(page["text"])
        if task.payload.get("raw_html"):
            content, content_type = page["text"], "html"
        else:
            content, content_type = re.sub(r"\n\s*\n+", "\n\n", html.unescape("".join(parsed.parts))).strip(), "markdown"
        title = parsed.title.strip() if parsed.title else None
        return {"url": url, "final_url": page["final_url"], "status_code": page["status_code"], "content_type": content_type, "content": content, "title": title}

    @solver.handler("web_search")
    async def web_search(task: Task) -> Dict[str, Any]:
        words = set(re.findall(r"\w+", task.payload["query"].lower()))
        scored = [(len(words & set(re.findall(r"\w+", (page["title"] + " " + page["text"]).lower()))), page) for page in PAGES]
        best = [page for score, page in sorted(scored, key=lambda pair: -pair[0]) if score > 0][: int(task.payload.get("count", 5))]
        return {"results": [{"title": p["title"], "url": p["url"], "snippet": p["text"]} for p in best]}

    return solver


async def main(args: argparse.Namespace) -> int:
    api_key = args.api_key or os.environ.get("SOLVER_API_KEY")
    if not api_key:
        if not args.register:
            print("an API key is needed: --api-key, SOLVER_API_KEY, or --register for a new account", file=sys.stderr)
            return 2
        account = await MarketplaceClient(args.url).register()
        api_key = account["api_key"]
        emit("registered", account_id=account["account_id"], api_key=api_key)

    solver = build_solver(args, api_key)

    async def on_connected(welcome: Dict[str, Any]) -> None:
        emit("connected", solver_id=welcome["solver_id"], connections=solver.connections)
        if args.self_test and solver.connections == 1:
            tests = [("proxy_fetch", {"url": args.self_test_url} if args.self_test_url else None), ("web_search", None)]
            for task_type, payload in tests:
                emit("test_result", **(await solver.test_task(task_type, payload)))

    solver.on_connected = on_connected
    loop = asyncio.get_running_loop()
    stopping: List[asyncio.Task[None]] = []

    def request_stop() -> None:
        if not stopping:
            stopping.append(asyncio.ensure_future(solver.stop(grace_s=args.grace)))

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, request_stop)

    try:
        await solver.run()
    except ReplacedError as error:
        emit("replaced", message=str(error))
        return 3
    except MarketplaceHTTPError as error:
        emit("refused", status=error.status, message=str(error))
        return 2
    if stopping:
        await stopping[0]
    emit("stopped")
    return 0


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("MARKETPLACE_URL", "http://127.0.0.1:3000"))
    parser.add_argument("--api-key")
    parser.add_argument("--register", action="store_true", help="register a new account when no key is given")
    parser.add_argument("--price", default="1", help="min_price_points of both capabilities (decimal string)")
    parser.add_argument("--max-concurrent", type=int, default=4)
    parser.add_argument("--grace", type=float, default=10.0, help="seconds running tasks get to finish on shutdown")
    parser.add_argument("--self-test", action="store_true", help="run test mode for each task type once connected")
    parser.add_argument("--self-test-url", help="the page the proxy_fetch test task fetches (default: the server's)")
    parser.add_argument("--allow-private-networks", action="store_true", help="fetch loopback and private addresses (local testing only)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO").upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(asyncio.run(main(parse_args())))
