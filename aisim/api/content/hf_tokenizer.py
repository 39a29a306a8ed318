"""Hugging Face tokenizers: the server's own counting as a tokenizer folder, and a real tokenizer for the server.

`aisim tokenizer save DIR` writes `tokenizer.json` and `tokenizer_config.json`, a Hugging Face tokenizer
that counts exactly as the server's built-in default (`tokenizer.HeuristicTokenizer`) does, so that
benchmark clients that size and count requests with a tokenizer (guidellm `--processor DIR`, aiperf
`--tokenizer DIR`, `transformers.AutoTokenizer.from_pretrained(DIR)`) agree with the server's `usage`
offline. The heuristic is one regular expression whose matches are the tokens; the folder is exactly
that: a `Split` pre-tokenizer with the same expression (in Oniguruma's syntax, which the `tokenizers`
library uses: the same backtracking alternation as Python's `re`) and a `WordLevel` model, which makes
every piece one token. Its ids are not the server's (those are computed from the piece's bytes, up to
2**53, and a tokenizer's vocabulary is a finite table): the vocabulary holds the ASCII characters and the
pieces of aisim's lorem text and common tokens, the others are one unknown token (`UNKNOWN`). Counts are
exact; ids and decoding are only for those pieces. The files are generated from aisim's own code (MIT), nothing
trained or downloaded.

`aisim serve --tokenizer DIR` (vLLM's flag: a folder with a `tokenizer.json`, or a Hugging Face model id
already in the local cache, `HF_HUB_CACHE` / `HF_HOME`) makes the server count, split and `/tokenize`
with that real tokenizer through the `tokenizers` library (`pip install 'aisim[tokenizer]'`).
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...extras import require
from .logprobs import ALTERNATIVES
from .text import LOREM_WORDS
from .tokenizer import _RULES, Tokenizer, default_tokenizer

UNKNOWN = " \u25a1"
"""The text of a piece outside the vocabulary (" □"): a space and a three-byte character, which the built-in
tokenizer makes one piece whatever comes before or after it (the space cannot join a whitespace piece before
it: those leave their last space to what follows), so text decoded from ids counts as many tokens as it has
ids (as clients that make prompts by decoding ids, aiperf and guidellm, expect). Not a special token:
decoding keeps it."""


def heuristic_pattern() -> str:
    """The default tokenizer's expression in Oniguruma's syntax: `\\x{...}` for code points beyond ASCII,
    and no surrogates (text in a Rust string is UTF-8, where they cannot occur)."""
    pattern = "|".join(_RULES)
    pattern = re.sub(r"\\U([0-9a-fA-F]{8})", lambda m: f"\\x{{{int(m.group(1), 16):x}}}", pattern)
    pattern = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: f"\\x{{{int(m.group(1), 16):x}}}", pattern)
    return pattern.replace("\\x{800}-\\x{ffff}", "\\x{800}-\\x{d7ff}\\x{e000}-\\x{ffff}")


def _vocabulary() -> dict[str, int]:
    """The unknown token, the ASCII characters, digit groups and space runs, then the pieces of lorem words (bare,
    spaced, Capitalised) and of the common tokens, in a fixed order."""
    heuristic = default_tokenizer()
    pieces: list[str] = [UNKNOWN, *map(chr, range(128))]
    # every digit group and runs of spaces: numbers and indentation decode as themselves
    pieces += [f"{n:0{width}d}" for width in (1, 2, 3) for n in range(10**width)]
    pieces += [" " * n for n in range(2, 17)]
    for word in LOREM_WORDS:
        for form in (word, " " + word, word.capitalize(), " " + word.capitalize()):
            pieces += heuristic.pieces(form)
    for token in ALTERNATIVES:
        pieces += heuristic.pieces(token)
    return {piece: index for index, piece in enumerate(dict.fromkeys(pieces))}


def heuristic_tokenizer_json() -> dict[str, Any]:
    """`tokenizer.json` of the default tokenizer's counting (see the module docstring)."""
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [],
            "normalizer": None,
            "pre_tokenizer": {"type": "Split", "pattern": {"Regex": heuristic_pattern()}, "behavior": "Isolated",
                              "invert": False},
            "post_processor": None, "decoder": {"type": "Fuse"},
            "model": {"type": "WordLevel", "vocab": _vocabulary(), "unk_token": UNKNOWN}}


def save(directory: str | Path) -> list[Path]:
    """Write the default tokenizer's folder (`tokenizer.json`, `tokenizer_config.json`); returns the files."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    # no `unk_token` here: transformers would make it a special token, which decoding with
    # `skip_special_tokens` (guidellm's prompts) drops, and the text would count fewer tokens than its ids
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000,
              "clean_up_tokenization_spaces": False, "add_bos_token": False, "add_eos_token": False,
              "aisim": "the counting of aisim's built-in tokenizer (aisim tokenizer save)"}
    written = [folder / "tokenizer.json", folder / "tokenizer_config.json"]
    written[0].write_text(json.dumps(heuristic_tokenizer_json(), ensure_ascii=False) + "\n", encoding="utf-8")
    written[1].write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return written


class HFTokenizer(Tokenizer):
    """A Hugging Face `tokenizer.json` behind the server's `Tokenizer` interface (no special tokens added:
    the chat template's tokens are counted as for the default)."""

    def __init__(self, path: Path, name: str) -> None:
        require("tokenizer", "aisim serve --tokenizer")
        from tokenizers import Tokenizer as Loaded
        self._tokenizer = Loaded.from_file(str(path))
        self.name = name
        self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)

    def pieces(self, text: str) -> list[str]:
        """The text cut at each token's start (tokens of one character share it: the later ones are empty)."""
        offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        starts = [0] + [start for start, _ in offsets[1:]] + [len(text)]
        return [text[a:b] for a, b in itertools.pairwise(starts)] if offsets else []

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Iterable[int]) -> str:
        given = list(ids)
        unknown = [i for i in given if not 0 <= i < self.vocab_size]
        if unknown:
            raise ValueError(f"token id {unknown[0]} is not in the vocabulary of {self.vocab_size}")
        return str(self._tokenizer.decode(given, skip_special_tokens=False))

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def _cached(model_id: str) -> Path | None:
    """A Hugging Face model id's `tokenizer.json` in the local hub cache (the `main` snapshot, else the newest)."""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    repo = Path(hub) / ("models--" + model_id.replace("/", "--"))
    main = repo / "refs" / "main"
    if main.is_file():
        found = repo / "snapshots" / main.read_text().strip() / "tokenizer.json"
        if found.is_file():
            return found
    snapshots = sorted((repo / "snapshots").glob("*/tokenizer.json"), key=lambda p: p.stat().st_mtime)
    return snapshots[-1] if snapshots else None


def load_tokenizer(spec: str) -> Tokenizer:
    """`--tokenizer`: a folder (or file) with a `tokenizer.json`, or a model id in the local Hugging Face cache."""
    require("tokenizer", "aisim serve --tokenizer")
    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        cached = _cached(spec)
        if cached is None:
            raise FileNotFoundError(f"--tokenizer {spec}: no tokenizer.json there, nor in the local Hugging Face cache "
                                    "(aisim does not download)")
        path = cached
    return HFTokenizer(path, spec)
