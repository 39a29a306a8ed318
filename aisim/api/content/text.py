"""The text a simulated model answers with, from the scenario's `content` setting.

Everything here is a pure function of its arguments: the same request (prompt, model, seed)
gives the same text, so responses can be snapshot-tested. Randomness comes only from
`numpy.random.default_rng(seed)`.

Kinds (`aisim.scenario.models.Content`):

- `lorem`: lorem-ipsum sentences of exactly the requested number of words;
- `template`: the template with `{{last_user_message}}`, `{{prompt}}`, `{{model}}` and
  `{{seed}}` replaced (spaces inside the braces allowed; unknown placeholders stay as written);
- `echo`: the last user message;
- `fixed`: the configured text;
- `dataset`: a JSONL file of `{"prompt": ..., "response": ...}` lines; a request whose last
  user message (or else whole prompt) equals a line's prompt, ignoring surrounding whitespace,
  gets that line's response, any other request a pick by seed.

Only `lorem` honours the word count; the server cuts every text to the request's token budget
and can stretch a short one with `repeat_to_words`.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import InputError
from ...scenario.distributions import CountDistribution
from ...scenario.models import (
    Content,
    DatasetContent,
    EchoContent,
    FixedContent,
    LoremContent,
    TemplateContent,
)

LOREM_WORDS: tuple[str, ...] = (
    "lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do",
    "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim",
    "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi",
    "aliquip", "ex", "ea", "commodo", "consequat", "duis", "aute", "irure", "in", "reprehenderit",
    "voluptate", "velit", "esse", "cillum", "eu", "fugiat", "nulla", "pariatur", "excepteur",
    "sint", "occaecat", "cupidatat", "non", "proident", "sunt", "culpa", "qui", "officia",
    "deserunt", "mollit", "anim", "id", "est", "laborum",
)
"""The vocabulary of the classic lorem-ipsum passage."""

PLACEHOLDERS: tuple[str, ...] = ("last_user_message", "prompt", "model", "seed")
"""Names a template may use as `{{name}}`."""

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_SENTENCE_WORDS = (5, 15)
_SENTENCES_PER_PARAGRAPH = (3, 7)


def rng_for(seed: int) -> np.random.Generator:
    """A generator for a request seed; negative seeds (the API allows int64) wrap to unsigned."""
    return np.random.default_rng(seed % 2**64)


def lorem_words(rng: np.random.Generator, count: int) -> list[str]:
    """`count` lowercase lorem words, never the same word twice in a row."""
    if count <= 0:
        return []
    picks = rng.integers(len(LOREM_WORDS), size=count).tolist()
    for i in range(1, count):
        if picks[i] == picks[i - 1]:
            picks[i] = (picks[i] + 1) % len(LOREM_WORDS)
    return [LOREM_WORDS[p] for p in picks]


def lorem(rng: np.random.Generator, words: int) -> str:
    """Lorem-ipsum prose of exactly `words` words: capitalised sentences with periods, some commas,
    and paragraphs separated by blank lines."""
    pool = lorem_words(rng, words)
    paragraphs: list[str] = []
    sentences: list[str] = []
    per_paragraph = int(rng.integers(*_SENTENCES_PER_PARAGRAPH))
    start = 0
    while start < len(pool):
        sentence = pool[start:start + int(rng.integers(*_SENTENCE_WORDS))]
        start += len(sentence)
        sentence[0] = sentence[0].capitalize()
        if len(sentence) >= 7 and rng.random() < 0.4:
            comma = int(rng.integers(2, len(sentence) - 2))
            sentence[comma] += ","
        sentences.append(" ".join(sentence) + ".")
        if len(sentences) == per_paragraph:
            paragraphs.append(" ".join(sentences))
            sentences = []
            per_paragraph = int(rng.integers(*_SENTENCES_PER_PARAGRAPH))
    if sentences:
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def repeat_to_words(text: str, words: int) -> str:
    """`text` repeated (space-separated) until it has at least `words` words, for a token budget
    longer than a fixed, echoed or templated answer; a text without words is returned as it is."""
    have = len(text.split())
    if have == 0 or have >= words:
        return text
    return " ".join([text.strip()] * -(-words // have))


def render_template(template: str, values: dict[str, str]) -> str:
    """Replace each `{{name}}` whose name is in `values`; leave other placeholders as written."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


class DatasetError(InputError, ValueError):
    """A content dataset file that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Dataset:
    """Prompt/response pairs of a JSONL file, with an index by stripped prompt."""

    pairs: tuple[tuple[str, str], ...]
    by_prompt: dict[str, tuple[str, ...]]

    def answer(self, keys: tuple[str, ...], seed: int) -> str:
        """The response for the first key that is a known prompt, else one picked by seed."""
        rng = rng_for(seed)
        for key in keys:
            matches = self.by_prompt.get(key.strip())
            if matches:
                return matches[int(rng.integers(len(matches)))]
        return self.pairs[int(rng.integers(len(self.pairs)))][1]


def load_dataset(path: Path) -> Dataset:
    """Read a dataset file, cached while its size and modification time stay the same."""
    try:
        stat = path.stat()
    except OSError as error:
        raise DatasetError(f"{path}: cannot read content dataset: {error.strerror or error}") from error
    return _load_dataset(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _load_dataset(path: Path, mtime_ns: int, size: int) -> Dataset:
    pairs: list[tuple[str, str]] = []
    by_prompt: dict[str, list[str]] = {}
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            pair = _pair(path, number, raw)
            if pair is None:
                continue
            pairs.append(pair)
            by_prompt.setdefault(pair[0].strip(), []).append(pair[1])
    if not pairs:
        raise DatasetError(f"{path}: no prompt/response lines in content dataset")
    return Dataset(tuple(pairs), {k: tuple(v) for k, v in by_prompt.items()})


def _pair(path: Path, number: int, raw: bytes) -> tuple[str, str] | None:
    """One line's (prompt, response), or None for a blank line."""
    where = f"{path}:{number}"
    try:
        line = raw.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as error:
        raise DatasetError(f"{where}: not UTF-8: {error.reason} at byte {error.start}") from error
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{where}: not a JSON line: {error.msg} (column {error.colno})") from error
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: expected an object with 'prompt' and 'response', got {type(record).__name__}")
    for key in ("prompt", "response"):
        if not isinstance(record.get(key), str):
            problem = "missing" if key not in record else f"not a string ({type(record[key]).__name__})"
            raise DatasetError(f"{where}: '{key}' is {problem}")
    prompt: str = record["prompt"]
    response: str = record["response"]
    return prompt, response


class ContentSource:
    """The response text of one served model; build it once per model (a dataset is read here, so a
    bad file fails at startup, with a `DatasetError`)."""

    def __init__(self, content: Content, base_dir: Path) -> None:
        self.content = content
        self.base_dir = base_dir
        self.dataset = load_dataset(base_dir / content.file) if isinstance(content, DatasetContent) else None

    @property
    def uses_seed(self) -> bool:
        """Whether the text depends on the request's seed (echo and fixed texts do not)."""
        return not isinstance(self.content, (EchoContent, FixedContent))

    @property
    def tokens(self) -> CountDistribution | None:
        """Response length in tokens when a request sets no max_tokens (None: the server's default)."""
        return self.content.tokens

    def text(self, *, prompt: str, last_user_message: str, model: str, seed: int, words: int) -> str:
        """The answer to one request.

        Args:
            prompt: the whole prompt as the model sees it (chat messages rendered, or the completion prompt).
            last_user_message: the last user message's text (for completions, the prompt).
            model: the model id the client asked for.
            seed: the request's seed (or one the server derived from the request).
            words: length for `lorem`; the other kinds return their natural text.
        """
        content = self.content
        if isinstance(content, LoremContent):
            return lorem(rng_for(seed), words)
        if isinstance(content, EchoContent):
            return last_user_message
        if isinstance(content, FixedContent):
            return content.text
        if isinstance(content, TemplateContent):
            values = {"last_user_message": last_user_message, "prompt": prompt, "model": model, "seed": str(seed)}
            return render_template(content.template, values)
        assert self.dataset is not None
        return self.dataset.answer((last_user_message, prompt), seed)
