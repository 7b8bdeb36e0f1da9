"""Loaded by schemathesis in the fuzz test (test/fuzz.test.ts).

Hypothesis names a filtered strategy by parsing the source of its lambda; on CPython 3.11.7 that parse
sometimes raises `SystemError: AST constructor recursion depth mismatch` deep inside schemathesis's
own generator, which ends the run as a runtime error. The name is only a label, so a failed parse
gets a placeholder instead.

The run learns the fuzzing account's own id from its answers and offers it to the admin routes. A
simulated rate limit armed on that account answers every later request of the run 429 until a reset
happens to be drawn: about a third of a run's requests, which then never reach the routes past their
rate limit. Such a call targets the other account instead.
"""

import os

import schemathesis
from hypothesis.internal import lambda_sources

_describe = lambda_sources._lambda_description


def _describe_or_placeholder(f):
    try:
        return _describe(f)
    except SystemError:
        return "lambda: <unknown>"


lambda_sources._lambda_description = _describe_or_placeholder

_OWN_ACCOUNT = os.environ.get("FUZZ_OWN_ACCOUNT")
_OTHER_ACCOUNT = os.environ.get("FUZZ_OTHER_ACCOUNT")


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    if (
        _OWN_ACCOUNT
        and case.operation.path.endswith("/simulate-rate-limit")
        and isinstance(case.body, dict)
        and case.body.get("account_id") == _OWN_ACCOUNT
    ):
        case.body["account_id"] = _OTHER_ACCOUNT
