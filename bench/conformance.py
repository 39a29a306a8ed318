"""The long conformance run: OpenAI's OpenAPI document as the oracle of `aisim serve`'s OpenAI personality,
thousands of generated requests (the CI test, tests/test_openai_conformance.py, sends a few hundred).

    python bench/conformance.py [--requests 1500] [--seed 1]

Prints per operation: requests sent (schema-valid, schema-invalid), statuses, 5xx, 200 bodies the response
schema rejects, schema-invalid requests accepted, schema-valid requests refused, and then every finding no
documented exception (docs/openai-conformance.md) covers, by key.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the oracle lives with the tests

from aisim.testing import running_server
from tests.oracle import (
    OPENAI_EXCEPTIONS,
    OPENAI_OPERATIONS,
    OPENAI_SPEC,
    Spec,
    run_operation,
    unexplained,
)

SCENARIO = Path(__file__).resolve().parent.parent / "tests" / "scenarios" / "serve" / "fuzz-openai.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500, help="requests per POST operation")
    parser.add_argument("--seed", type=int, default=1, help="generator seed")
    args = parser.parse_args()
    spec = Spec(OPENAI_SPEC)
    totals: Counter[str] = Counter()
    left_all: list[str] = []
    with running_server(SCENARIO) as url, httpx.Client(base_url=url, timeout=60) as client:
        for index, operation in enumerate(OPENAI_OPERATIONS):
            count = args.requests if operation.request else 20
            tally = run_operation(client, spec, operation, count, seed=args.seed * 1000 + index)
            print(tally.line(operation.name), flush=True)
            left = unexplained(operation.name, tally, OPENAI_EXCEPTIONS)
            left_all += [f"{operation.name} {item}" for item in left]
            totals.update(sent=tally.sent, server_errors=len(tally.server_errors), bad_200=len(tally.bad_200),
                          accepted_invalid=len(tally.accepted_invalid), refused_valid=len(tally.refused_valid),
                          unexplained=len(left))
    print(f"total: {totals['sent']} requests, 5xx {totals['server_errors']}, schema-invalid 200 bodies "
          f"{totals['bad_200']} (all documented exceptions unless listed below), invalid accepted "
          f"{totals['accepted_invalid']}, valid refused {totals['refused_valid']}, unexplained {totals['unexplained']}")
    keys = Counter(item.split(" <- ")[0].split(":")[0] for item in left_all)
    for key, count in keys.most_common():
        example = next(item for item in left_all if item.startswith(key))
        print(f"  {count:5d}  {key}\n         e.g. {example[:600]}")
    return 1 if left_all else 0


if __name__ == "__main__":
    sys.exit(main())
