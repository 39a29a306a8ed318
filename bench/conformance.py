"""The long conformance run: OpenAI's OpenAPI document as the oracle of `aisim serve`'s OpenAI personality, and
KServe's Open Inference Protocol REST document as the oracle of its Triton personality, with thousands of
generated requests (the CI tests, tests/test_openai_conformance.py and tests/test_kserve_conformance.py, send a
few hundred).

    python bench/conformance.py [--requests 1000] [--seed 1] [--only openai|kserve]

Prints per operation: requests sent (schema-valid, schema-invalid), statuses, 5xx, 200 bodies the response
schema rejects, schema-invalid requests accepted, schema-valid requests refused; then every finding that no
documented exception (docs/openai-conformance.md) covers, by key, with an example. Exits 1 if there is one.
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
    KSERVE_EXCEPTIONS,
    KSERVE_OPERATIONS,
    KSERVE_SPEC,
    OPENAI_EXCEPTIONS,
    OPENAI_OPERATIONS,
    OPENAI_SPEC,
    Operation,
    Spec,
    run_operation,
    unexplained,
)

SCENARIOS = Path(__file__).resolve().parent.parent / "tests" / "scenarios" / "serve"
SUITES = {
    "openai": (SCENARIOS / "fuzz-openai.yaml", OPENAI_SPEC, OPENAI_OPERATIONS, OPENAI_EXCEPTIONS),
    "kserve": (SCENARIOS / "triton.yaml", KSERVE_SPEC, KSERVE_OPERATIONS, KSERVE_EXCEPTIONS),
}


def run_suite(name: str, requests: int, seed: int) -> list[str]:
    scenario, path, operations, exceptions = SUITES[name]
    spec = Spec(path)
    totals: Counter[str] = Counter()
    left_all: list[str] = []
    with running_server(scenario) as url, httpx.Client(base_url=url, timeout=60) as client:
        if name == "kserve":
            for _ in range(100):  # the models' simulated load times
                if client.get("/v2/models/resnet50/versions/1/ready").status_code == 200:
                    break
        operation: Operation
        for index, operation in enumerate(operations):
            count = requests if operation.request else 20
            tally = run_operation(client, spec, operation, count, seed=seed * 1000 + index)
            print(tally.line(operation.name), flush=True)
            left = unexplained(operation.name, tally, exceptions)
            left_all += [f"{operation.name} {item}" for item in left]
            totals.update(sent=tally.sent, server_errors=len(tally.server_errors), bad_200=len(tally.bad_200),
                          accepted_invalid=len(tally.accepted_invalid), refused_valid=len(tally.refused_valid),
                          unexplained=len(left))
    print(f"{name} total: {totals['sent']} requests, 5xx {totals['server_errors']}, schema-invalid 200 bodies "
          f"{totals['bad_200']}, invalid accepted {totals['accepted_invalid']}, valid refused "
          f"{totals['refused_valid']}; not covered by a documented exception: {totals['unexplained']}")
    keys = Counter(item.split(" <- ")[0].split(":")[0] for item in left_all)
    for key, count in keys.most_common():
        example = next(item for item in left_all if item.startswith(key))
        print(f"  {count:5d}  {key}\n         e.g. {example[:600]}")
    return left_all


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per POST operation")
    parser.add_argument("--seed", type=int, default=1, help="generator seed")
    parser.add_argument("--only", choices=sorted(SUITES), help="one document only")
    args = parser.parse_args()
    left = [item for name in SUITES if args.only in (None, name) for item in run_suite(name, args.requests, args.seed)]
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
