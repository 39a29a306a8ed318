"""Token counting for the server personalities, through a pluggable tokenizer.

The server reports `usage`, streams one whole number of tokens per delta, and serves vLLM's
`/tokenize` and `/detokenize`; all of it goes through a `Tokenizer`: `pieces(text)` cuts the text
into token strings whose concatenation is the text, `encode` / `decode` map them to ids and back
exactly, `count` is `len(pieces)`. A real tokenizer needs a model's vocabulary, which aisim does not
ship, so the default is a heuristic that imitates a modern byte-level BPE (cl100k / o200k style).

The heuristic (`HeuristicTokenizer`, name `"heuristic"`) is one regular expression whose matches
are the pieces, applied left to right:
- an English contraction (`'s`, `'ll`, ...);
- one ASCII punctuation mark glued to a lowercase word (`.get`, `_tokens`, `(self`);
- a word with its leading space: lowercase in chunks of up to 11 letters, Capitalised up to 10,
  UPPER-case runs up to 10 (camelCase splits at each capital);
- digits in groups of up to three, without a space;
- punctuation in pairs, with an optional leading space and up to two trailing line breaks;
- non-ASCII by UTF-8 width: two-byte characters (accents, Greek, Cyrillic, Hebrew, Arabic) up to
  three per piece (two after a space), wider ones (CJK, kana, symbols, emoji) one per piece;
- whitespace: a run up to its last line break is one piece; otherwise a run is one piece, except
  that its last space goes with the word after it.
Common English words thus cost one token, as in a real BPE; rare long words cost two or more
(a real BPE also splits words it has not learnt).

Error against real BPE tokenizers, (heuristic - real) / real, on `bench/data/tokenizer_sample.txt`
(measured by `python bench/tokenizer_error.py` with tiktoken 0.14.0; `tests/test_api_tokenizer.py`
recomputes each figure from reference counts of the real tokenizers):

    kind           cl100k_base   o200k_base
    prose            -1.3 %        -1.2 %
    code             -0.9 %        -1.6 %
    numbers          -1.2 %        -1.3 %
    json             -0.9 %        -1.5 %
    non-english     -15.4 %       +19.8 %
    all              -2.8 %        +0.5 %

Non-English text is where real vocabularies differ most: o200k has far more multilingual tokens
than cl100k (343 tokens against 486 on the sample's non-English part), so no one rule matches both;
the heuristic lands between them. Expect larger errors on short texts, on rare words and on
languages the sample does not cover.

Ids. `decode(encode(text)) == text` for every `str`, lone surrogates included, and ids are the
same in every process, so an id is computed from its piece's bytes, not looked up or hashed:
- ids below 256 + 256**2 + ... + 256**6 (about 2**48): pieces of one to six UTF-8 bytes, in
  shortlex order of their bytes (the 256 one-byte pieces first, so the id of an ASCII character is
  its code point, then the two-byte pieces from 256 on, ...);
- then, in ranges of their own, the longer pieces the rules can make, each numbered by its prefix
  and its letters read as a number in base 26 (or 6 for whitespace): lowercase words with an
  optional leading space, punctuation-glued lowercase words, Capitalised words, UPPER-case runs,
  whitespace runs (see `_TIERS`).
Every piece the rules make fits one of these, and all ids stay below 2**53 (`vocab_size`), so they
survive JSON in any client, JavaScript numbers included. Pieces never split a character, so a
streamed delta of whole pieces is always valid text; a sequence of ids that cuts a character
decodes with U+FFFD, as real tokenizers do.

Streaming. The pieces of any run of consecutive pieces are those pieces again: cutting a text's
pieces into deltas and counting each delta gives the count of the text. Usage therefore agrees
with the stream however the server groups pieces (pieces of two texts joined are not covered:
tokenize the joined text).

Chat prompts (`chat_prompt_tokens`) follow OpenAI's published counting rule (the cookbook's
`num_tokens_from_messages`): 3 tokens per message for the template around it, every string field
of the message encoded (role, content, name, tool_call_id, ...), 1 more for a `name`, and 3 for the
primer of the reply (`<|start|>assistant<|message|>`). aisim adds what that rule leaves out: list
content counts its text and refusal parts and `IMAGE_PART_TOKENS` per image; each tool call counts
its function name and arguments plus `TOKENS_PER_TOOL_CALL` for its framing. `chat_prompt_ids` gives
the ids of that same template (vLLM's `/tokenize` of `messages`), so the two always agree.

Other tokenizers plug in by name with `register_tokenizer`; `get_tokenizer(name)` builds each one
once.
"""

from __future__ import annotations

import bisect
import json
import operator
import re
import string
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

TOKENS_PER_MESSAGE = 3
"""Template tokens around each chat message: `<|start|>`, `<|message|>` after the role, `<|end|>`."""
TOKENS_PER_NAME = 1
"""Extra token for a message's `name` field."""
REPLY_PRIMER_TOKENS = 3
"""`<|start|>assistant<|message|>`, which primes every reply."""
TOKENS_PER_TOOL_CALL = 3
"""Framing of one tool call in an assistant message (aisim's choice, by analogy with a message)."""
IMAGE_PART_TOKENS = 85
"""An image content part: OpenAI's price of a `detail: low` image (GPT-4o); higher detail costs more."""
DEFAULT_TOKENIZER = "heuristic"
TEMPLATE_TOKEN = "\ue000"
"""The text of a chat-template token in `chat_prompt_ids`: a private-use character, one piece."""


class Tokenizer(Protocol):
    """What the server needs from a tokenizer; subclass it to inherit `chat_prompt_tokens`."""

    name: str
    vocab_size: int
    """Every id is in `range(vocab_size)`."""

    def pieces(self, text: str) -> list[str]:
        """The token strings of `text`, which concatenate to `text`."""
        ...

    def encode(self, text: str) -> list[int]:
        """One id per piece."""
        ...

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`; the exact inverse of `encode`. Raises ValueError for an unknown id."""
        ...

    def count(self, text: str) -> int:
        """`len(pieces(text))`, faster."""
        ...

    def chat_prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        """Prompt tokens of chat messages (and tool definitions), template included (`chat_prompt_tokens`)."""
        return chat_prompt_tokens(messages, self, tools)


_PUNCT = r"!-/:-@\[-`{-~"  # the 32 ASCII punctuation marks
_WS = r"\t-\r "  # ASCII whitespace: tab, line feed, vertical tab, form feed, carriage return, space
_RULES = (
    r"'(?i:[sdmt]|ll|ve|re)",  # contractions
    rf"[{_PUNCT}][a-z]{{1,9}}",  # punctuation glued to a lowercase word
    r" ?[a-z]{1,11}",  # lowercase word
    r" ?[A-Z][a-z]{1,9}",  # Capitalised word
    r" ?[A-Z]{1,10}(?![a-z])",  # UPPER-case run; leaves the capital of a following Word
    r"[0-9]{1,3}",  # digits
    rf" ?[{_PUNCT}\x00-\x08\x0e-\x1f\x7f]{{1,2}}[\r\n]{{0,2}}",  # punctuation and control characters
    r" [\u0080-\u07ff]{1,2}|[\u0080-\u07ff]{1,3}",  # two-byte characters
    r" ?[\u0800-\uffff]",  # three-byte characters (lone surrogates too)
    r" ?[\U00010000-\U0010ffff]",  # four-byte characters
    rf"[{_WS}]{{0,15}}[\r\n]",  # whitespace up to its last line break
    rf"[{_WS}]{{1,16}}(?!(?<= )[^{_WS}0-9])",  # whitespace, leaving its last space to a word after it
    r"[\s\S]",  # anything else (every character is covered above; this keeps `pieces` total)
)
_PIECE = re.compile("|".join(_RULES))

_SHORT_BYTES = 6
"""Pieces of up to this many UTF-8 bytes are numbered by their bytes."""
_DIGITS = string.digits + string.ascii_lowercase


def _shortlex_offsets(base: int, max_len: int) -> list[int]:
    """offsets[n]: how many non-empty strings over `base` symbols are shorter than n symbols."""
    offsets = [0, 0]
    for length in range(1, max_len + 1):
        offsets.append(offsets[-1] + base**length)
    return offsets


_BYTE_OFFSETS = _shortlex_offsets(256, _SHORT_BYTES)


class _Tier:
    """A range of ids for long pieces: a prefix from `prefixes`, then 1..`max_len` letters of `alphabet`.

    A piece's rank in the tier is `prefix index * strings + shortlex rank of its letters`, where the
    letters read as a base-`len(alphabet)` number rank them among strings of their length.
    `capital`: the first letter is upper case (the letters are numbered in lower case).
    """

    def __init__(self, prefixes: tuple[str, ...], alphabet: str, max_len: int, capital: bool = False) -> None:
        self.prefixes = prefixes
        self.alphabet = alphabet
        self.capital = capital
        self.offsets = _shortlex_offsets(len(alphabet), max_len)
        self.size = len(prefixes) * self.offsets[-1]
        self._to_digits = str.maketrans(alphabet, _DIGITS[: len(alphabet)])
        prefix = "(?:" + "|".join(re.escape(p) for p in prefixes if p) + ")" + ("?" if "" in prefixes else "")
        first = re.escape(alphabet.upper() if capital else alphabet)
        self._pattern = re.compile(f"({prefix})([{first}][{re.escape(alphabet)}]{{0,{max_len - 1}}})")

    def rank(self, piece: str) -> int | None:
        """The piece's rank in this tier, or None if the tier cannot hold it."""
        match = self._pattern.fullmatch(piece)
        if match is None:
            return None
        prefix, letters = match.groups()
        letters = letters.lower() if self.capital else letters
        value = int(letters.translate(self._to_digits), len(self.alphabet))
        return self.prefixes.index(prefix) * self.offsets[-1] + self.offsets[len(letters)] + value

    def piece(self, rank: int) -> str:
        """The piece of a rank in `range(size)`."""
        prefix, rest = divmod(rank, self.offsets[-1])
        length = bisect.bisect_right(self.offsets, rest) - 1
        value = rest - self.offsets[length]
        letters = []
        for _ in range(length):
            value, digit = divmod(value, len(self.alphabet))
            letters.append(self.alphabet[digit])
        word = "".join(reversed(letters))
        return self.prefixes[prefix] + (word.capitalize() if self.capital else word)


_TIERS = (
    _Tier(("", " "), string.ascii_lowercase, 11),
    _Tier(tuple(c for c in map(chr, range(128)) if re.fullmatch(f"[{_PUNCT}]", c)), string.ascii_lowercase, 9),
    _Tier(("", " "), string.ascii_lowercase, 10, capital=True),
    _Tier(("", " "), string.ascii_uppercase, 10),
    _Tier(("",), " \t\n\r\x0b\x0c", 16),
)
_TIER_STARTS = [_BYTE_OFFSETS[-1]]
for _tier in _TIERS:
    _TIER_STARTS.append(_TIER_STARTS[-1] + _tier.size)


class HeuristicTokenizer(Tokenizer):
    """The default tokenizer: BPE-like pieces from one regular expression, ids from their bytes."""

    name = "heuristic"
    vocab_size = _TIER_STARTS[-1]

    def pieces(self, text: str) -> list[str]:
        return _PIECE.findall(text)

    def count(self, text: str) -> int:
        return len(_PIECE.findall(text))

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in _PIECE.findall(text):
            raw = piece.encode("utf-8", "surrogatepass")
            if len(raw) <= _SHORT_BYTES:
                ids.append(_BYTE_OFFSETS[len(raw)] + int.from_bytes(raw, "big"))
            else:
                ids.append(self._long_id(piece))
        return ids

    @staticmethod
    def _long_id(piece: str) -> int:
        for start, tier in zip(_TIER_STARTS, _TIERS):
            rank = tier.rank(piece)
            if rank is not None:
                return start + rank
        raise AssertionError(f"no id for the piece {piece!r}")  # the rules make no such piece

    def decode(self, ids: Iterable[int]) -> str:
        raw = bytearray()
        for token in ids:
            try:
                token = operator.index(token)
            except TypeError:
                raise ValueError(f"token id {token!r} is not an integer") from None
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"token id {token} is out of range [0, {self.vocab_size})")
            if token < _TIER_STARTS[0]:
                length = bisect.bisect_right(_BYTE_OFFSETS, token) - 1
                raw += (token - _BYTE_OFFSETS[length]).to_bytes(length, "big")
            else:
                index = bisect.bisect_right(_TIER_STARTS, token) - 1
                raw += _TIERS[index].piece(token - _TIER_STARTS[index]).encode("ascii")
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:  # ids that cut a character, as a client may send
            return raw.decode("utf-8", "replace")


def chat_prompt_tokens(messages: list[dict[str, Any]], tokenizer: Tokenizer, tools: list[dict[str, Any]] | None = None) -> int:
    """Prompt tokens of chat `messages` and `tools` (their functions' definitions): their fields plus the chat
    template (see the module docstring)."""
    count = tokenizer.count
    total = 0
    for segment in _chat_template(messages, tools):
        total += segment if isinstance(segment, int) else count(segment)
    return total


def chat_prompt_ids(messages: list[dict[str, Any]], tokenizer: Tokenizer, tools: list[dict[str, Any]] | None = None,
                    add_generation_prompt: bool = True) -> list[int]:
    """The ids of the prompt `chat_prompt_tokens` counts (vLLM's `/tokenize` of `messages`): the same template,
    so that the two agree. Text is encoded; a template token (`<|start|>`, an image, ...) is the id of
    `TEMPLATE_TOKEN`. Without `add_generation_prompt`, the reply's primer is left out."""
    mark = tokenizer.encode(TEMPLATE_TOKEN)[:1]
    ids: list[int] = []
    for segment in _chat_template(messages, tools, add_generation_prompt):
        ids += mark * segment if isinstance(segment, int) else tokenizer.encode(segment)
    return ids


def _chat_template(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                   add_generation_prompt: bool = True) -> Iterator[str | int]:
    """The chat template of `messages` in order, as text to tokenize (a str) and runs of template tokens (an int);
    the tool definitions, which the model reads too, as their JSON at the end."""
    for message in messages:
        yield 1  # <|start|>, then the role (a string field like the others)
        for key, value in message.items():
            if value.__class__ is str:  # the common case first: a role, a text content, a name
                yield value
                if key == "name":
                    yield TOKENS_PER_NAME
            elif key == "content":
                yield from _content(value)
            elif key == "tool_calls":
                for call in value or []:
                    yield from _call(call.get("function") or {})
            elif key == "function_call" and isinstance(value, dict):
                yield from _call(value)
        yield TOKENS_PER_MESSAGE - 1  # <|message|> and <|end|>
    if add_generation_prompt:
        yield REPLY_PRIMER_TOKENS
    if tools:
        yield json.dumps(tools)


def _content(content: Any) -> Iterator[str | int]:
    for part in content if isinstance(content, list) else []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "refusal") and isinstance(part.get(kind), str):
            yield part[kind]
        elif kind == "image_url":
            yield IMAGE_PART_TOKENS


def _call(function: dict[str, Any]) -> Iterator[str | int]:
    yield TOKENS_PER_TOOL_CALL
    for key in ("name", "arguments"):
        if isinstance(function.get(key), str):
            yield function[key]


class UnknownTokenizerError(LookupError):
    """A tokenizer name that nothing registered."""


_FACTORIES: dict[str, Callable[[], Tokenizer]] = {HeuristicTokenizer.name: HeuristicTokenizer}
_BUILT: dict[str, Tokenizer] = {}


def register_tokenizer(name: str, factory: Callable[[], Tokenizer]) -> None:
    """Make `get_tokenizer(name)` build a tokenizer with `factory` (a real one, say, for one model)."""
    _FACTORIES[name] = factory
    _BUILT.pop(name, None)


def tokenizer_names() -> list[str]:
    """The registered names, sorted."""
    return sorted(_FACTORIES)


def get_tokenizer(name: str = DEFAULT_TOKENIZER) -> Tokenizer:
    """The tokenizer registered as `name`, built on first use and shared after."""
    if name not in _BUILT:
        if name not in _FACTORIES:
            raise UnknownTokenizerError(f"unknown tokenizer {name!r}; known: {', '.join(tokenizer_names())}")
        _BUILT[name] = _FACTORIES[name]()
    return _BUILT[name]


def default_tokenizer() -> Tokenizer:
    """The tokenizer a server uses when nothing names another."""
    return get_tokenizer(DEFAULT_TOKENIZER)
