"""Loaded by schemathesis in the fuzz test (test/fuzz.test.ts).

Hypothesis names a filtered strategy by parsing the source of its lambda; on CPython 3.11.7 that parse
sometimes raises `SystemError: AST constructor recursion depth mismatch` deep inside schemathesis's
own generator, which ends the run as a runtime error. The name is only a label, so a failed parse
gets a placeholder instead.
"""

from hypothesis.internal import lambda_sources

_describe = lambda_sources._lambda_description


def _describe_or_placeholder(f):
    try:
        return _describe(f)
    except SystemError:
        return "lambda: <unknown>"


lambda_sources._lambda_description = _describe_or_placeholder
