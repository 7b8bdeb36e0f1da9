"""Drives one call of the installed Firecrawl Python SDK (firecrawl-py 1.x or 4.x, whichever PYTHONPATH
names) against the service, as a user's program would, and prints what the SDK returned as JSON.

Usage: python firecrawl_sdk.py '<json request>' with {"api_url", "api_key", "call": "scrape"|"search", ...},
or with {"call": <any client method>, "args": [...], "kwargs": {...}} to call that method as written.
An exception raised by the SDK is printed as {"raised": class name, "message", "status"}.
With --serve, it reads one request a line from its input until that ends, and prints each answer on a
line of its own after ANSWER.
"""
import json
import sys

import firecrawl

ANSWER = "@@firecrawl-sdk-answer@@ "


def plain(value):
    """Pydantic models (4.x) and dicts (1.x) alike as JSON-ready values, absent fields left out."""
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True)
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items() if item is not None}
    return value


def answer(request):
    """The SDK's answer to one request, as a JSON text."""
    major = int(firecrawl.__version__.split(".")[0])
    try:
        if "args" in request:
            client = firecrawl.Firecrawl(api_key=request["api_key"], api_url=request["api_url"]) if major >= 4 else firecrawl.FirecrawlApp(api_key=request["api_key"], api_url=request["api_url"])
            result = getattr(client, request["call"])(*request["args"], **request.get("kwargs", {}))
        elif major >= 4:
            client = firecrawl.Firecrawl(api_key=request["api_key"], api_url=request["api_url"])
            if request["call"] == "scrape":
                result = client.scrape(request["url"], **request.get("options", {}))
            else:
                result = client.search(request["query"], **request.get("options", {}))
        else:
            client = firecrawl.FirecrawlApp(api_key=request["api_key"], api_url=request["api_url"])
            if request["call"] == "scrape":
                result = client.scrape_url(request["url"], params=request.get("options", {}))
            else:
                result = client.search(request["query"], params=request.get("options", {}))
        # Times (a crawl's expires_at) are printed as text.
        return json.dumps({"version": firecrawl.__version__, "result": plain(result)}, default=str)
    except Exception as error:  # the test asserts on what the SDK raised
        status = getattr(error, "status_code", None)
        return json.dumps({"version": firecrawl.__version__, "raised": type(error).__name__, "message": str(error), "status": status})


def main():
    if sys.argv[1] == "--serve":
        for line in sys.stdin:
            if line.strip():
                print(ANSWER + answer(json.loads(line)), flush=True)
    else:
        print(answer(json.loads(sys.argv[1])))


main()
