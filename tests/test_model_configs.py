"""Every Hugging Face config of AIConfigurator's model folder is loaded or refused with its reason.

The folder (`shared/data/aiconfigurator-vllm/model-configs/`, Apache-2.0) ships with the tests as
`data/aiconfigurator-model-configs.tar.xz`, unchanged. A loaded config's parameter count is checked against the
size its publisher gives (model cards: total and active parameters in billions; vendors count the active ones
with or without the input embedding, so the published figure must fall between ours without it and ours); a
refused one must name the config key that shows what aisim does not model. An `hf_quant_config.json` is read
with the config beside it: a loaded model then carries its ModelOpt method.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from aisim.scenario.architecture import ConfigError
from aisim.scenario.hfconfig import read_config

from .conftest import ROOT

ARCHIVE = ROOT / "tests" / "data" / "aiconfigurator-model-configs.tar.xz"
with tarfile.open(ARCHIVE) as _archive:
    NAMES = sorted(Path(m.name).name for m in _archive.getmembers() if m.name.startswith("model-configs/") and m.isfile())

PUBLISHED: dict[str, tuple[float, float] | None] = {
    "MiniMaxAI--MiniMax-M2.5": (229, 10), "MiniMaxAI--MiniMax-M2.7": (229, 10),
    "nvidia--MiniMax-M2.5-NVFP4": (229, 10), "nvidia--MiniMax-M2.7-NVFP4": (229, 10),
    "Qwen--Qwen3-0.6B": (0.6, 0.6), "Qwen--Qwen3-1.7B": (1.7, 1.7), "Qwen--Qwen3-8B": (8.2, 8.2),
    "Qwen--Qwen3-32B": (32.8, 32.8), "Qwen--Qwen3-32B-FP8": (32.8, 32.8), "Qwen--Qwen3-32B-FP8-Static-PerTensor": (32.8, 32.8),
    "Qwen--Qwen3-30B-A3B": (30.5, 3.3), "Qwen--Qwen3-30B-A3B-FP8": (30.5, 3.3),
    "Qwen--Qwen3-235B-A22B": (235, 22), "Qwen--Qwen3-235B-A22B-FP8": (235, 22), "nvidia--Qwen3-235B-A22B-NVFP4": (235, 22),
    "Qwen--Qwen3-Coder-480B-A35B-Instruct": (480, 35),
    "Qwen--Qwen3-VL-2B-Instruct": (2.1, 1.7), "Qwen--Qwen3-VL-4B-Instruct": (4.4, 4.0), "Qwen--Qwen3-VL-8B-Instruct": (8.8, 8.2),
    "Qwen--Qwen3-VL-32B-Instruct": (33.4, 32.8), "Qwen--Qwen3-VL-32B-Thinking": (33.4, 32.8),
    "Qwen--Qwen3-VL-30B-A3B-Instruct": (31.1, 3.3), "Qwen--Qwen3-VL-235B-A22B-Instruct": (236, 22),
    "XiaomiMiMo--MiMo-7B-Base": (7.8, 7.8),
    "deepseek-ai--DeepSeek-V3": (671, 37), "deepseek-ai--DeepSeek-R1": (671, 37), "nvidia--DeepSeek-V3.1-NVFP4": (671, 37),
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": (109, 17), "meta-llama--Llama-4-Maverick-17B-128E-Instruct": (400, 17),
    "meta-llama--Meta-Llama-3.1-8B": (8.0, 8.0), "meta-llama--Meta-Llama-3.1-70B": (70.6, 70.6),
    "meta-llama--Meta-Llama-3.1-405B": (406, 406), "nvidia--Llama-3.1-70B-Instruct-FP8": (70.6, 70.6),
    "mistralai--Mixtral-8x7B-v0.1": (46.7, 12.9), "mistralai--Mixtral-8x22B-v0.1": (141, 39),
    "moonshotai--Kimi-K2-Instruct": (1000, 32), "moonshotai--Kimi-K2.5": (1000, 32), "nvidia--Kimi-K2.5-NVFP4": (1000, 32),
    "nvidia--Kimi-K2.6-NVFP4": (1000, 32), "nvidia--Kimi-K2.7-Code-NVFP4": (1000, 32),
    "openai--gpt-oss-120b": (117, 5.1), "openai--gpt-oss-20b": (21, 3.6),
    "stepfun-ai--Step-3.7-Flash": None, "stepfun-ai--Step-3.7-Flash-FP8": None,
}
"""Published (total, active) billions of the models aisim loads: their model cards (Llama 4 Scout's 109B and the
Qwen3-VL sizes count the vision encoder; Kimi's 1T is rounded). Step 3.7 Flash publishes none to check against."""

REFUSED: dict[str, str] = {
    "MiniMax-M3": "sparse_attention_config", "Qwen3.5": "layer_types", "Qwen3.6": "layer_types",
    "MiMo-V2-Flash": "swa_num_key_value_heads", "DeepSeek-V3.2": "index_topk", "DeepSeek-V4": "compress_ratios",
    "gemma-4": "global_head_dim", "Gemma-4": "global_head_dim", "Kimi-K3": "linear_attn_config",
    "GLM-5": "index_topk", "Nemotron-Super-49B": "block_configs", "Nemotron-3": "hybrid_override_pattern",
    "Nemotron-H": "hybrid_override_pattern",
}
"""Refused architectures, by a part of the file name, and the config key their refusal must name."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("aiconfigurator")
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(target, filter="data")
    return target / "model-configs"


def _refusal(stem: str) -> str | None:
    return next((key for part, key in REFUSED.items() if part in stem), None)


def _outcome(path: Path) -> tuple[str, str]:
    try:
        arch = read_config(path)
    except ConfigError as error:
        return "refused", f"{error.key}: {error.reason}"
    return "loaded", arch.quantization


@pytest.mark.parametrize("name", NAMES)
def test_every_config_loads_or_is_refused_with_its_reason(folder: Path, name: str) -> None:
    if name.endswith("_hf_quant_config.json"):
        stem = name.removesuffix("_hf_quant_config.json")
        outcome, detail = _outcome(folder / f"{stem}_config.json")
        if _refusal(stem) is None:  # its config loads, and took the ModelOpt method from this file
            assert (outcome, detail.startswith("modelopt")) == ("loaded", True), detail
        else:
            assert outcome == "refused"
        return
    stem = name.removesuffix("_config.json")
    key = _refusal(stem)
    if key is not None:
        with pytest.raises(ConfigError) as caught:
            read_config(folder / name)
        assert key in caught.value.key and str(folder / name) in str(caught.value)
        assert "is not modelled:" in caught.value.reason
        return
    arch = read_config(folder / name)
    published = PUBLISHED[stem]
    if published is not None:
        total, active = published
        assert abs(arch.params / 1e9 / total - 1) < 0.03, (arch.params, total)
        assert arch.active_params is not None
        without_embedding = (arch.active_params - arch.vocab * arch.hidden) / 1e9
        assert without_embedding * 0.95 <= active <= arch.active_params / 1e9 * 1.05, (arch.active_params, active)
    assert arch.weight_bytes() > 0 and arch.layers and arch.heads


def test_the_folder_counts(folder: Path) -> None:
    """113 files: 86 model configs, of which 44 load and 42 are refused, and 27 ModelOpt quantization files."""
    configs = [n for n in NAMES if not n.endswith("_hf_quant_config.json")]
    outcomes = [_outcome(folder / n)[0] for n in configs]
    counts = (len(NAMES), len(configs), outcomes.count("loaded"), outcomes.count("refused"))
    print(f"files, model configs, loaded, refused: {counts}")
    assert counts == (113, 86, 44, 42)
    assert all((_refusal(n) is None) == (o == "loaded") for n, o in zip(configs, outcomes))


def test_derived_numbers_of_each_kind(folder: Path) -> None:
    """MoE layers and shared experts, MLA, layer patterns and multimodal wrappers, as the configs give them."""
    deepseek = read_config(folder / "deepseek-ai--DeepSeek-V3_config.json")
    assert (deepseek.mla, deepseek.kv_lora_rank, deepseek.qk_rope_head_dim, deepseek.dense_layers) == (True, 512, 64, (0, 1, 2))
    assert (deepseek.moe_layers, deepseek.shared_experts, deepseek.shared_intermediate) == (58, 1, 2048)
    assert deepseek.format_of("experts") == "fp8_block"
    gpt = read_config(folder / "openai--gpt-oss-120b_config.json")
    assert gpt.attention_types.count("sliding_attention") == 18 and gpt.sliding_window == 128 and gpt.sinks
    assert (gpt.format_of("experts"), gpt.format_of("attention"), gpt.format_of("lm_head")) == ("mxfp4", "bf16", "bf16")
    step = read_config(folder / "stepfun-ai--Step-3.7-Flash_config.json")
    assert step.attention_types.count("full_attention") == 12 and step.dense_layers == (0, 1, 2)
    scout = read_config(folder / "meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json")
    assert scout.attention_types.count("chunked_attention") == 36 and scout.attention_chunk == 8192
    kimi = read_config(folder / "moonshotai--Kimi-K2.5_config.json")  # a wrapper: text_config, compressed-tensors INT4
    assert kimi.mla and kimi.experts == 384 and kimi.format_of("experts") == "int4_wo" and kimi.vision_params > 0
    assert kimi.format_of("attention") == "bf16" and kimi.format_of("shared") == "bf16"  # its `ignore` list
    vl = read_config(folder / "Qwen--Qwen3-VL-235B-A22B-Instruct_config.json")
    assert vl.experts == 128 and vl.max_position == 262144 and vl.vision_params > 0
    nvfp4 = read_config(folder / "nvidia--DeepSeek-V3.1-NVFP4_config.json")  # hf_quant_config.json beside it
    assert nvfp4.quantization == "modelopt_fp4" and nvfp4.format_of("experts") == "nvfp4"
    assert nvfp4.format_of("attention_latent") == "bf16"  # q_a_proj and kv_a_proj_with_mqa are excluded


def test_a_broken_config_names_its_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": "32"}')
    with pytest.raises(ConfigError) as caught:
        read_config(tmp_path)  # a folder holding config.json
    assert (caught.value.path, caught.value.key) == (str(path), "num_hidden_layers")
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        read_config(path)
    path.write_text('{"architectures": ["BertModel"]}')
    with pytest.raises(ConfigError, match="BertModel is not an architecture aisim models"):
        read_config(path)
