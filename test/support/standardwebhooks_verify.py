"""Verifies webhook deliveries with the official Standard Webhooks library (PyPI `standardwebhooks`), as a
receiver's program would, and prints for each whether it verified.

Usage: python standardwebhooks_verify.py '<json>' with {"secret", "deliveries": [{"headers", "body"}]}.
Prints {"results": [{"verified": true, "type": ...} | {"verified": false, "error": ...}]}.
"""
import json
import sys

from standardwebhooks.webhooks import Webhook


def main():
    request = json.loads(sys.argv[1])
    try:
        webhook = Webhook(request["secret"])
    except Exception as error:  # noqa: BLE001 - a secret the library cannot decode verifies nothing
        refused = {"verified": False, "error": f"{type(error).__name__}: {error}"}
        print(json.dumps({"results": [refused for _ in request["deliveries"]]}))
        return
    results = []
    for delivery in request["deliveries"]:
        try:
            payload = webhook.verify(delivery["body"], delivery["headers"])
            results.append({"verified": True, "type": payload["type"]})
        except Exception as error:  # noqa: BLE001 - any refusal is reported, not raised
            results.append({"verified": False, "error": f"{type(error).__name__}: {error}"})
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
