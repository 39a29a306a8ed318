"""`aisim tokenizer save DIR` (the built-in tokenizer's counting as a Hugging Face folder) and `aisim serve
--tokenizer DIR` (a real tokenizer for the server), checked with the `tokenizers` library as clients load it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from aisim.api.content.hf_tokenizer import save
from aisim.api.content.text import LOREM_WORDS
from aisim.api.content.tokenizer import default_tokenizer
from aisim.testing import running_server

from .conftest import TEST_SCENARIOS

FAST = TEST_SCENARIOS / "serve" / "fast-mock.yaml"
HEURISTIC = default_tokenizer()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    folder = tmp_path_factory.mktemp("aisim-tokenizer")
    save(folder)
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


TEXTS = st.one_of(
    st.text(max_size=300),  # any Unicode (no lone surrogates: they cannot be in a client's UTF-8 text)
    st.text(st.characters(max_codepoint=127), max_size=300),  # ASCII: code, JSON, numbers
    st.lists(st.sampled_from(["the", " The", "HTTPServer", "camelCase", "don't", "  ", "\n\n", "123456", "ab.cd",
                              "é", "日本", "🙂", "\t", " ,", "))", "x_y"]), max_size=40).map("".join),
)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_the_saved_tokenizer_counts_as_the_server(saved: Tokenizer, text: str) -> None:
    assert len(saved.encode(text).ids) == HEURISTIC.count(text)


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.integers(0, 400))
def test_text_decoded_from_ids_counts_as_many_tokens(saved: Tokenizer, text: str, cut: int) -> None:
    """How aiperf and guidellm make a prompt of N tokens: decode the first N ids of a text. Pieces outside the
    vocabulary decode as one unknown piece each, so the server counts N."""
    ids = saved.encode(text).ids[:cut]
    assert HEURISTIC.count(saved.decode(ids)) == len(ids)


def test_the_sample_and_the_servers_usage_count_alike(saved: Tokenizer) -> None:
    sample = (Path(__file__).resolve().parent.parent / "bench" / "data" / "tokenizer_sample.txt").read_text()
    assert len(saved.encode(sample).ids) == HEURISTIC.count(sample) > 3000
    with running_server(FAST) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        for prompt in ("Hello there, how are you?", sample[:2000], "def f(x):\n    return x ** 2  # 日本語"):
            reply = client.completions.create(model="quick", prompt=prompt, max_tokens=30)
            assert reply.usage.prompt_tokens == len(saved.encode(prompt).ids)
            assert reply.usage.completion_tokens == len(saved.encode(reply.choices[0].text).ids)


def test_lorem_text_decodes_back(saved: Tokenizer) -> None:
    text = " ".join(LOREM_WORDS[:20]).capitalize() + ", in culpa qui officia."
    assert saved.decode(saved.encode(text).ids) == text


def test_transformers_loads_the_folder_and_counts_alike(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    save(tmp_path)
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in ("Hello there, how are you?", "HTTPServer.get(camelCase) -> 12345", "naïve café 日本"):
        assert len(auto(text, add_special_tokens=False)["input_ids"]) == HEURISTIC.count(text)
    # guidellm makes a prompt of N tokens as decode(encode(text)[:N], skip_special_tokens=True): words outside the
    # vocabulary must survive that and still count one token each
    ids = auto.encode("Quantum zebras juggle 1234 flaming torches, don't they?", add_special_tokens=False)[:7]
    assert HEURISTIC.count(auto.decode(ids, skip_special_tokens=True)) == 7


def test_the_cli_writes_the_folder(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "aisim", "tokenizer", "save", str(tmp_path / "tok")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(tmp_path / "tok" / "tokenizer.json"), str(tmp_path / "tok" / "tokenizer_config.json")]
    assert len(Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json")).encode("Hello there").ids) == 2


def _bpe(folder: Path) -> Tokenizer:
    """A small real byte-level BPE, trained here on lorem text (what a model folder's tokenizer.json is)."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [" ".join(LOREM_WORDS[i:] + LOREM_WORDS[:i]) for i in range(len(LOREM_WORDS))]
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    folder.mkdir()
    bpe.save(str(folder / "tokenizer.json"))
    return bpe


def test_serve_with_a_real_tokenizer_counts_splits_and_tokenizes_with_it(tmp_path: Path) -> None:
    bpe = _bpe(tmp_path / "bpe")
    prompt = "Lorem ipsum dolor sit amet, quantum zebra 2024!"
    assert len(bpe.encode(prompt).ids) != HEURISTIC.count(prompt)  # the two tokenizers differ on this text
    with running_server(FAST, tokenizer=str(tmp_path / "bpe")) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        reply = client.completions.create(model="quick", prompt=prompt, max_tokens=12)
        assert reply.usage.prompt_tokens == len(bpe.encode(prompt).ids)
        assert reply.usage.completion_tokens == len(bpe.encode(reply.choices[0].text).ids)
        stream = client.completions.create(model="quick", prompt=prompt, max_tokens=12, stream=True)
        deltas = [chunk.choices[0].text for chunk in stream if chunk.choices and chunk.choices[0].finish_reason is None]
        assert len(deltas) == len(bpe.encode("".join(deltas)).ids)  # one token per streamed delta
        tokens = httpx.post(f"{url}/tokenize", json={"model": "quick", "prompt": prompt}).json()
        assert tokens["tokens"] == bpe.encode(prompt).ids and max(tokens["tokens"]) < bpe.get_vocab_size()
        back = httpx.post(f"{url}/detokenize", json={"model": "quick", "tokens": tokens["tokens"]}).json()
        assert back["prompt"] == prompt


def test_an_unknown_tokenizer_stops_serve_with_a_message(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "aisim", "serve", "--port", "0", "--tokenizer", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60, env={"HF_HUB_CACHE": str(tmp_path), "PATH": ""},
                          check=False)
    assert done.returncode == 1 and "no tokenizer.json there, nor in the local Hugging Face cache" in done.stderr
