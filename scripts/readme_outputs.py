"""Every console output that README.md and docs/*.md show, checked against the command that prints it.

    python scripts/readme_outputs.py             # check: exit 1 with a diff for each stale block
    python scripts/readme_outputs.py --update    # rewrite the stale blocks from the commands' output
    python scripts/readme_outputs.py --slow      # include the slow blocks (the full capacity plan)

A ```console block is checked when the line before it is a marker:

- `<!-- output -->`: each `$ COMMAND` line is run from the repository's root with bash (`aisim` is this
  checkout's `python -m aisim`), stdout and stderr together, as a terminal shows them; the lines under it are
  what it printed. A line `...` stands for any number of lines (none included), a line ending in `...` for a
  line that starts with what comes before; without `...` the block is the whole output.
- `<!-- output: served -->`: the first command is an `aisim serve` that stays up (its banner is what it
  prints first); the other commands talk to it. It runs on free ports: every listener's port is moved by
  one offset in the commands, and moved back in what they print.
- `<!-- output: slow -->`: as `<!-- output -->`, checked only with `--slow` (or AISIM_DOCS_SLOW=1 in the
  tests): the example plan takes minutes.
- `<!-- quickstart: NAME -->`: checked by `tests/test_quickstart.py`, which follows the README's quick start.

Before comparing, wall-clock figures (and what else is not deterministic, in NORMALISE) are masked in both.
`--update` replaces each shown line with the output line of the same shape (its words, numbers aside), so an
excerpt stays the same excerpt with today's figures; a block whose lines changed shape is left for a person.
Rerun it when the engine or the cost model moves the figures, and read the diff.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- (output|quickstart)(?::\s*([\w-]+))? -->")
ELLIPSIS = "..."
TIMEOUT = 600
SLOW_TIMEOUT = 7200
"""The full example plan: about 2 minutes on 8 free cores, over 10 on 2 shared ones."""

NORMALISE = [
    (re.compile(r"in [\d.,]+ wall s \([\d,.]+x real time\)"), "in # wall s (#x real time)"),
    (re.compile(r"\d[\d,]* simulations, \d[\d,]* from the cache"), "# simulations, # from the cache"),
]
"""What changes from run to run of the same command: wall-clock time, the plan's cache hits."""


def normalise(line: str) -> str:
    line = line.rstrip()
    for pattern, replacement in NORMALISE:
        line = pattern.sub(replacement, line)
    return line


def shape(line: str) -> str:
    """A line's words without its figures and spacing: what stays when the figures move."""
    return " ".join(re.sub(r"[-+]?\d[\d,.]*(e[-+]?\d+)?", "#", normalise(line)).split())


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)


@dataclass
class Block:
    page: Path
    kind: str
    mode: str
    start: int
    """Index of the block's first line (after the fence)."""
    end: int
    """Index of the closing fence."""
    steps: list[Step]

    @property
    def where(self) -> str:
        heading, fence = "", False
        for line in self.page.read_text(encoding="utf-8").splitlines()[:self.start]:
            fence = fence != line.startswith("```")
            heading = line if line.startswith("#") and not fence else heading
        return f"{self.page.relative_to(ROOT)}:{self.start} ({heading.lstrip('# ')})"


def blocks(page: Path) -> tuple[list[Block], list[int]]:
    """The page's marked console blocks, and the line numbers of console blocks with no marker."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, unmarked = [], []
    index = 0
    while index < len(lines):
        if lines[index].startswith("```console"):
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            marker = MARKER.fullmatch(lines[index - 1].strip()) if index else None
            if marker is None:
                unmarked.append(index + 1)
            else:
                steps: list[Step] = []
                for line in lines[index + 1:end]:
                    if line.startswith("$ "):
                        steps.append(Step(line[2:]))
                    elif steps:
                        steps[-1].shown.append(line)
                found.append(Block(page, marker.group(1), marker.group(2) or "", index + 1, end, steps))
            index = end
        index += 1
    return found, unmarked


def matches(shown: list[str], actual: list[str]) -> bool:
    """Whether `shown` (with `...` lines and `...` line ends) is what `actual` printed."""
    return _place(shown, [normalise(line) for line in actual]) is not None


def _same(shown: str, actual: str) -> bool:
    shown = normalise(shown)
    if shown.endswith(ELLIPSIS) and shown != ELLIPSIS:
        return actual.startswith(shown[:-len(ELLIPSIS)].rstrip())
    return shown == actual


def _place(shown: list[str], actual: list[str], same: Callable[[str, str], bool] = _same) -> list[int] | None:
    """For each shown line (`...` excluded) the index of the actual line it stands for, or None."""
    segments: list[list[str]] = [[]]
    for line in shown:
        if line.strip() == ELLIPSIS:
            segments.append([])
        else:
            segments[-1].append(line)
    open_start, open_end = not segments[0], not segments[-1]
    placed: list[int] = []
    position = 0
    for number, segment in enumerate(segments):
        if not segment:
            continue
        last = number == len(segments) - 1
        starts = [position] if number == 0 and not open_start else range(position, len(actual) - len(segment) + 1)
        for start in starts:
            if start + len(segment) > len(actual):
                break
            if all(same(s, actual[start + i]) for i, s in enumerate(segment)):
                if last and not open_end and start + len(segment) != len(actual):
                    continue
                placed += range(start, start + len(segment))
                position = start + len(segment)
                break
        else:
            return None
    if len(segments) == 1 and not segments[0]:  # an empty block: the command prints nothing
        return [] if not actual else None
    return placed


def updated(shown: list[str], actual: list[str]) -> list[str] | None:
    """`shown` rewritten from `actual`, line for line by shape; None when a line has no counterpart."""
    if ELLIPSIS not in [line.strip() for line in shown]:
        return actual
    indices = _place(shown, actual, lambda s, a: shape(s.removesuffix(ELLIPSIS)) == shape(a)[:len(shape(s.removesuffix(ELLIPSIS)))]
                     if s.endswith(ELLIPSIS) else shape(s) == shape(a))
    if indices is None:
        return None
    out, taken = [], iter(indices)
    for line in shown:
        if line.strip() == ELLIPSIS:
            out.append(line)
            continue
        new = actual[next(taken)]
        if line.endswith(ELLIPSIS):
            new = new[:max(len(line) - len(ELLIPSIS), 1)].rstrip() + " " + ELLIPSIS
        out.append(new)
    return out


def _environment() -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    env.pop("AISIM_TRACEBACK", None)
    return env


PRELUDE = f'aisim() {{ "{sys.executable}" -m aisim "$@"; }}\npython() {{ "{sys.executable}" "$@"; }}\n'
"""`aisim` and `python` in a command are this checkout's and this interpreter's."""


def run(command: str, timeout: int = TIMEOUT) -> list[str]:
    try:
        done = subprocess.run(["bash", "-c", PRELUDE + command], cwd=ROOT, env=_environment(), capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return [f"(no output: the command ran past {timeout} s)"]
    text = done.stdout + done.stderr
    return text.rstrip("\n").split("\n") if text.strip() else []


def _ports(serve: str) -> list[int]:
    """The ports a shown `aisim serve` command binds: its scenario's listeners, `--port` first."""
    from aisim.cli import build_parser
    from aisim.scenario import DEFAULT_SCENARIO, load_scenario

    args = build_parser().parse_args(serve.split("#", 1)[0].split()[1:])
    path = args.scenario or args.config or DEFAULT_SCENARIO
    ports = [listener.port for listener in load_scenario(ROOT / path).server.listeners]
    if args.port is not None:
        ports[0] = args.port
    return ports


def run_served(steps: list[Step]) -> list[list[str]]:
    """The output of each step of a served block: the server's banner, then each command's."""
    serve = steps[0].command
    ports = _ports(serve)
    from aisim.testing import free_port_offset

    offset = free_port_offset(ports)
    moved = re.sub(r"--port (\d+)", lambda m: f"--port {int(m.group(1)) + offset}", serve.split("#", 1)[0])
    moved = re.sub(r"^aisim\b", f'"{sys.executable}" -m aisim', moved.strip())
    process = subprocess.Popen(["bash", "-c", f"exec {moved} --port-offset {offset}"], cwd=ROOT,
                               env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def back(lines: list[str]) -> list[str]:
        for port in ports:
            lines = [re.sub(rf":{port + offset}\b", f":{port}", line) for line in lines]
        return lines

    try:
        banner = [process.stdout.readline().rstrip("\n") for _ in steps[0].shown]  # type: ignore[union-attr]
        outputs = [back(banner)]
        time.sleep(0.5)
        for step in steps[1:]:
            command = step.command
            for port in ports:
                command = re.sub(rf":{port}\b", f":{port + offset}", command)
            outputs.append(back(run(command)))
        return outputs
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def outputs(block: Block) -> list[list[str]]:
    if block.mode == "served":
        return run_served(block.steps)
    return [run(step.command, SLOW_TIMEOUT if block.mode == "slow" else TIMEOUT) for step in block.steps]


def check(block: Block) -> list[str]:
    """What differs, one message per stale step (empty: the block is what the commands print)."""
    problems = []
    for step, actual in zip(block.steps, outputs(block)):
        if not matches(step.shown, actual):
            problems.append(f"{block.where}: `$ {step.command}` printed\n" + "\n".join(f"    {line}" for line in actual)
                            + "\n  but the page shows\n" + "\n".join(f"    {line}" for line in step.shown))
    return problems


def update(block: Block) -> list[str]:
    """Rewrite the block's stale steps in its page; returns the steps it could not rewrite."""
    failed, new_body = [], []
    for step, actual in zip(block.steps, outputs(block)):
        new_body.append("$ " + step.command)
        if matches(step.shown, actual):
            new_body += step.shown
            continue
        rewritten = updated(step.shown, actual)
        if rewritten is None:
            failed.append(f"{block.where}: `$ {step.command}`: the output changed shape; edit the excerpt by hand")
            new_body += step.shown
        else:
            new_body += rewritten
    lines = block.page.read_text(encoding="utf-8").split("\n")
    lines[block.start:block.end] = new_body
    block.page.write_text("\n".join(lines), encoding="utf-8")
    return failed


def checked_blocks(slow: bool) -> tuple[list[Block], list[str]]:
    """The blocks this script checks, and the unmarked console blocks (each a problem)."""
    found, problems = [], []
    for page in PAGES:
        marked, unmarked = blocks(page)
        found += [b for b in marked if b.kind == "output" and (slow or b.mode != "slow")]
        problems += [f"{page.relative_to(ROOT)}:{line}: a console block with no output marker (see "
                     "scripts/readme_outputs.py)" for line in unmarked]
    return found, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite stale blocks from the commands' output")
    parser.add_argument("--slow", action="store_true", help="also the slow blocks (the full capacity plan)")
    parser.add_argument("pattern", nargs="?", default="", help="only blocks whose commands contain this")
    args = parser.parse_args()
    found, problems = checked_blocks(args.slow or os.environ.get("AISIM_DOCS_SLOW") == "1")
    found = [b for b in found if any(args.pattern in s.command for s in b.steps)]
    # later blocks first: an update changes the line numbers of what follows it on the page
    for block in sorted(found, key=lambda b: (str(b.page), -b.start)):
        problems += update(block) if args.update else check(block)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
