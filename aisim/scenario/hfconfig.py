"""A model's architecture from its Hugging Face `config.json`, read the way vLLM's model classes read it.

`read_config(path)` takes a `config.json`, a folder holding one, or a file named `<id>_config.json` (the
shared data folder's naming); a ModelOpt `hf_quant_config.json` beside it (`<id>_hf_quant_config.json`) gives
the quantization when the config has no `quantization_config`. A multimodal wrapper's language model is its
`text_config`; its encoder's weights are counted (approximately) into the parameters.

What each supported architecture contributes (the vLLM model file that reads it, under
`vllm/model_executor/models/`):
- dense GQA (`llama.py`, `qwen2.py`, `qwen3.py`, `mimo.py`): heads, KV heads, head size, MLP size; Qwen2's
  Q/K/V biases, Qwen3's per-head Q/K norms; a `sliding_window` on every layer for Mistral-style configs, on
  layers from `max_window_layers` when Qwen's `use_sliding_window` is set;
- MoE (`mixtral.py`, `qwen3_moe.py`, `minimax_m2.py`, `gpt_oss.py`, `llama4.py`): routed experts, experts per
  token, the expert MLP size, shared experts; which layers are MoE (`decoder_sparse_step`, `mlp_only_layers`,
  `interleave_moe_layer_step`, `first_k_dense_replace`, `moe_layer_freq`);
- MLA + MoE (`deepseek_v2.py` for DeepSeek V3/R1 and Kimi K2): `q_lora_rank`, `kv_lora_rank`,
  `qk_rope_head_dim`, `qk_nope_head_dim`, `v_head_dim`, shared experts, dense layers before the first MoE layer;
- layer patterns: `layer_types` (gpt-oss alternates sliding and full attention, with attention sinks; Step 3.7
  has one full layer in four); Llama 4's chunked local attention (`attention_chunk_size`, every fourth layer
  global, `no_rope_layers`).

Refused, with the reason (`REFUSED`): hybrid Mamba and linear-attention models, DeepSeek's sparse attention
(V3.2, GLM-5 DSA, V4), MiniMax M3's block-sparse attention, and models whose layers have different attention
shapes (Gemma 4, MiMo-V2-Flash) or different blocks (Nemotron-NAS); see `docs/models.md`.

Not modelled: multi-token-prediction layers (`num_nextn_predict_layers`: vLLM loads them only for speculative
decoding), MoE routers' grouping (`n_group`, `topk_group`), rope scaling (no effect on memory or FLOPs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from .architecture import AttentionType, ConfigError, ModelFamily
from .quantization import Module, override, read_scheme, weigh

FULL: AttentionType = "full_attention"
SLIDING: AttentionType = "sliding_attention"
CHUNKED: AttentionType = "chunked_attention"
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}

WRAPPERS = {
    "Qwen3VLForConditionalGeneration": "Qwen3ForCausalLM",
    "Qwen3VLMoeForConditionalGeneration": "Qwen3MoeForCausalLM",
    "KimiK25ForConditionalGeneration": "DeepseekV3ForCausalLM",
    "Llama4ForConditionalGeneration": "Llama4ForCausalLM",
}
"""Multimodal wrappers: the language model class their `text_config` describes."""

PREFIXES = {
    "Qwen3VLForConditionalGeneration": ("model.language_model.", "lm_head"),
    "Qwen3VLMoeForConditionalGeneration": ("model.language_model.", "lm_head"),
    "KimiK25ForConditionalGeneration": ("language_model.model.", "language_model.lm_head"),
    "Llama4ForConditionalGeneration": ("language_model.model.", "language_model.lm_head"),
}
"""Module names of a wrapper's language model (what a checkpoint's skip lists name): (layer prefix, LM head)."""

DENSE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MiMoForCausalLM")
MOE = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MiniMaxM2ForCausalLM", "GptOssForCausalLM",
       "Llama4ForCausalLM", "Step3p7FlashForCausalLM")
MLA = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")
SUPPORTED = DENSE + MOE + MLA + tuple(WRAPPERS)

REFUSED = {
    "NemotronHForCausalLM": ("hybrid_override_pattern", ("a hybrid Mamba-2 / attention model: its Mamba layers keep a "
                             "fixed-size recurrent state, not a KV cache, and aisim models attention layers only")),
    "Qwen3_5ForConditionalGeneration": ("text_config.layer_types", ("Gated DeltaNet linear-attention layers "
                                        "(`linear_attention`, three in four) keep a recurrent state, not a KV cache; "
                                        "aisim models attention layers only")),
    "Qwen3_5MoeForConditionalGeneration": ("text_config.layer_types", ("Gated DeltaNet linear-attention layers "
                                           "(`linear_attention`, three in four) keep a recurrent state, not a KV "
                                           "cache; aisim models attention layers only")),
    "KimiK3ForConditionalGeneration": ("text_config.linear_attn_config", ("Kimi Delta Attention (linear attention) "
                                       "layers keep a recurrent state, not a KV cache; aisim models attention layers "
                                       "only")),
    "KimiLinearForCausalLM": ("linear_attn_config", ("Kimi Delta Attention (linear attention) layers keep a recurrent "
                              "state, not a KV cache; aisim models attention layers only")),
    "DeepseekV32ForCausalLM": ("index_topk", ("DeepSeek Sparse Attention: an indexer with its own key cache picks "
                               "2,048 tokens per query; aisim would price dense MLA and misstate both the KV cache "
                               "and the attention time")),
    "GlmMoeDsaForCausalLM": ("index_topk", ("DeepSeek Sparse Attention (GLM-5's DSA): an indexer with its own key "
                             "cache picks the tokens each query attends to; aisim would price dense MLA")),
    "DeepseekV4ForCausalLM": ("compress_ratios", ("compressed sparse attention (per-layer KV compression ratios, an "
                              "indexer) and hyper-connections (`hc_mult`): not described by aisim's architecture")),
    "MiniMaxM3ForCausalLM": ("sparse_attention_config", ("block-sparse attention on most layers: aisim would price "
                             "dense attention")),
    "MiniMaxM3SparseForConditionalGeneration": ("text_config.sparse_attention_config", ("block-sparse attention on "
                                                "most layers: aisim would price dense attention")),
    "Gemma4ForConditionalGeneration": ("text_config.global_head_dim", ("global layers with their own head size and KV "
                                       "heads (`global_head_dim`, `num_global_key_value_heads`) and keys shared "
                                       "with values (`attention_k_eq_v`): per-layer attention shapes aisim's "
                                       "architecture does not describe")),
    "MiMoV2FlashForCausalLM": ("swa_num_key_value_heads", ("sliding-window layers with their own heads, KV heads and "
                               "value head size: per-layer attention shapes aisim's architecture does not describe")),
    "DeciLMForCausalLM": ("block_configs", ("per-layer blocks (layers without attention, layers with their own KV "
                          "heads and MLP sizes): not described by aisim's architecture")),
}
"""Architectures aisim refuses: (the config key that shows it, why)."""


@dataclass(frozen=True)
class Naming:
    """How a model names its modules (what quantization skip lists match)."""

    prefix: str = "model."
    head: str = "lm_head"
    moe: str = "mlp"
    router: str = "gate"
    shared: str = "shared_experts"


class _Reader:
    """Typed reads from one config section, raising `ConfigError` with the key's dotted path."""

    def __init__(self, data: Mapping[str, Any], path: str, prefix: str) -> None:
        self.data, self.path, self.prefix = data, path, prefix

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(self.path, self.prefix + key, message)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def integer(self, key: str, default: int | None = None, least: int = 0) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail(key, "missing: an integer is needed")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, not {value!r}")
        if value < least:
            raise self.fail(key, f"must be at least {least}, not {value}")
        return value

    def first(self, keys: tuple[str, ...], default: int | None = None, least: int = 0) -> int:
        """The first of `keys` that is set (config files name the same number differently)."""
        for key in keys:
            if self.has(key):
                return self.integer(key, least=least)
        if default is None:
            raise self.fail(keys[0], "missing: an integer is needed")
        return default

    def integers(self, key: str) -> list[int]:
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.fail(key, f"expected a list of integers, not {value!r}")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        return bool(value) if value is not None else default


def config_files(path: Path) -> tuple[Path, Path | None]:
    """The config file `path` names and its ModelOpt `hf_quant_config.json`, if there is one beside it."""
    config = path / "config.json" if path.is_dir() else path
    name = config.name
    quant_name = "hf_quant_config.json" if name == "config.json" else (
        name[: -len("config.json")] + "hf_quant_config.json" if name.endswith("_config.json") else "")
    quant = config.with_name(quant_name) if quant_name else None
    return config, quant if quant is not None and quant.is_file() else None


MAX_CONFIG_BYTES = 64 * 2**20
"""Largest config file read (the largest quantization file seen, MiniMax-M3-NVFP4's, is 3 MB)."""


def _load(path: Path) -> dict[str, Any]:
    if path.exists() and not path.is_file():
        raise ConfigError(str(path), "", "not a regular file (a Hugging Face config.json, or a folder holding one)")
    if path.is_file() and path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(str(path), "", f"larger than {MAX_CONFIG_BYTES // 2**20} MiB: not a model config")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(path), "", "no such file (a Hugging Face config.json, or a folder holding one)") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(str(path), "", f"cannot read it: {error}") from None
    except json.JSONDecodeError as error:
        raise ConfigError(str(path), "", f"not JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "a config.json is a JSON object")
    return data


def read_config(path: str | Path, quantization: str | None = None, name: str = "") -> ModelFamily:
    """The architecture a Hugging Face config describes (see the module docstring); `quantization` is vLLM's
    `--quantization` (None: the checkpoint's own). Raises `ConfigError` naming the file and the key."""
    config_path, quant_path = config_files(Path(path))
    data = _load(config_path)
    where = str(config_path)
    architectures = data.get("architectures")
    if not isinstance(architectures, list) or not architectures or not isinstance(architectures[0], str):
        raise ConfigError(where, "architectures", "missing: the model class vLLM would load (a list of one name)")
    outer = architectures[0]
    if outer in REFUSED:
        key, why = REFUSED[outer]
        raise ConfigError(where, key, f"{outer} is not modelled: {why}")
    if outer not in SUPPORTED:
        raise ConfigError(where, "architectures", f"{outer} is not an architecture aisim models; it reads "
                          f"{', '.join(sorted(SUPPORTED))}")
    section, prefix, naming = data, "", Naming()
    if outer in WRAPPERS:
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise ConfigError(where, "text_config", f"{outer} keeps its language model in text_config: missing")
        section, prefix = text, "text_config."
        layer_prefix, head = PREFIXES[outer]
        naming = Naming(prefix=layer_prefix, head=head)
    cls = WRAPPERS.get(outer, outer)
    reader = _Reader(section, where, prefix)
    quant_file = _load(quant_path) if quant_path is not None else None
    qkey = "quantization_config" if data.get("quantization_config") or not prefix else prefix + "quantization_config"
    quant_config = data.get("quantization_config") or section.get("quantization_config")
    scheme = read_scheme(quant_config, qkey, quant_file, where, str(quant_path or ""))
    arch, naming = _architecture(cls, reader, data, naming)
    if quantization is not None:
        scheme = override(scheme, quantization)
    vision = _vision_params(data.get("vision_config"))
    modules = list(_modules(arch, naming))
    if vision:
        modules.append(Module("vision_tower", "vision", vision))
    groups = weigh(modules, scheme, arch.dtype)
    params = sum(m.params for m in modules)
    notes = list(scheme.notes if scheme else ())
    if data.get("num_nextn_predict_layers") or section.get("num_nextn_predict_layers"):
        notes.append("its multi-token-prediction layers are not loaded (vLLM loads them for speculative decoding only)")
    if vision:
        notes.append(f"its encoder ({vision / 1e9:.2f}B parameters) is counted from vision_config, approximately")
    return replace(arch, name=name or _default_name(config_path), params=params,
                   active_params=params - vision - _inactive(arch, modules), vision_params=vision, weight_groups=groups,
                   quantization=scheme.method if scheme else "", kv_cache_quantization=scheme.kv_cache if scheme else "",
                   architecture=cls, source=where, notes=tuple(notes))


def _default_name(config: Path) -> str:
    stem = config.parent.name if config.name == "config.json" else config.name.removesuffix("_config.json")
    return stem.replace("--", "/")


def _dtype(reader: _Reader, outer: Mapping[str, Any]) -> str:
    for source in (reader.data, outer):
        for key in ("torch_dtype", "dtype"):
            value = source.get(key)
            if isinstance(value, str):
                if value not in DTYPES:
                    raise ConfigError(reader.path, key, f"dtype {value!r} is not one of {', '.join(DTYPES)}")
                return DTYPES[value]
    return "bf16"


# -- architectures -------------------------------------------------------------------------


def _architecture(cls: str, r: _Reader, outer: Mapping[str, Any], naming: Naming) -> tuple[ModelFamily, Naming]:
    layers = r.integer("num_hidden_layers", least=1)
    hidden = r.integer("hidden_size", least=1)
    heads = r.integer("num_attention_heads", least=1)
    kv_heads = r.integer("num_key_value_heads", heads, least=1)
    if heads % kv_heads:
        raise r.fail("num_key_value_heads", f"{kv_heads} KV heads do not divide {heads} attention heads")
    head_dim = r.integer("head_dim", hidden // heads, least=1)
    tied = bool(r.data.get("tie_word_embeddings", outer.get("tie_word_embeddings", False)))
    base = ModelFamily(
        name="", task="generate", params=0, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, intermediate=r.integer("intermediate_size", 0), vocab=r.integer("vocab_size", least=1),
        max_position=r.integer("max_position_embeddings", least=1), dtype=_dtype(r, outer),  # type: ignore[arg-type]
        tied_embeddings=tied, attention_bias=r.flag("attention_bias", cls == "Qwen2ForCausalLM"), architecture=cls,
    )
    if cls in MLA:
        return _mla(base, r), naming
    arch = replace(base, layer_types=_layer_types(cls, r, layers), sliding_window=_window(cls, r),
                   attention_chunk=r.integer("attention_chunk_size", 0) if cls == "Llama4ForCausalLM" else 0)
    if cls == "GptOssForCausalLM":
        arch = replace(arch, sinks=True)
    if cls in DENSE:
        if not arch.intermediate:
            raise r.fail("intermediate_size", "missing: the MLP size is needed")
        return arch, naming
    return _moe(cls, arch, r, naming)


def _layer_types(cls: str, r: _Reader, layers: int) -> tuple[AttentionType, ...]:
    given = r.data.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or len(given) != layers:
            raise r.fail("layer_types", f"expected one entry per layer ({layers})")
        unknown = sorted({t for t in given if t not in ("full_attention", "sliding_attention")})
        if unknown:
            raise r.fail("layer_types", f"{', '.join(map(str, unknown))} layers are not modelled (full_attention and "
                                        "sliding_attention are)")
        if "sliding_attention" in given and not r.has("sliding_window"):
            raise r.fail("sliding_window", "missing: the layer pattern has sliding_attention layers")
        return tuple(cast(list[AttentionType], given))
    if cls == "Llama4ForCausalLM" and r.has("attention_chunk_size"):
        global_every = r.integer("no_rope_layer_interval", 4, least=1)
        nope = r.data.get("no_rope_layers")
        local = [bool(flag) for flag in nope] if isinstance(nope, list) and len(nope) == layers else \
            [(i + 1) % global_every != 0 for i in range(layers)]
        return tuple(CHUNKED if flag else FULL for flag in local)
    window = _window(cls, r)
    if not window:
        return ()
    if cls in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MiMoForCausalLM"):
        first = r.integer("max_window_layers", layers)
        return tuple(SLIDING if i >= first else FULL for i in range(layers))
    return (SLIDING,) * layers


def _window(cls: str, r: _Reader) -> int:
    """The sliding window vLLM applies (`ModelConfig.get_sliding_window`: none when Qwen's `use_sliding_window` is
    off), 0 without one."""
    if not r.has("sliding_window"):
        return 0
    if cls.startswith(("Qwen", "MiMo")) and not r.flag("use_sliding_window"):
        return 0
    return r.integer("sliding_window", least=1)


def _mla(base: ModelFamily, r: _Reader) -> ModelFamily:
    nope, rope = r.integer("qk_nope_head_dim", least=1), r.integer("qk_rope_head_dim", least=1)
    experts = r.first(("n_routed_experts",), 1, least=1)
    first_dense = r.integer("first_k_dense_replace", 0)
    freq = r.integer("moe_layer_freq", 1, least=1)
    dense = tuple(i for i in range(base.layers) if experts <= 1 or i < first_dense or i % freq)
    shared = r.integer("n_shared_experts", 0)
    moe_inter = r.integer("moe_intermediate_size", base.intermediate)
    return replace(
        base, kv_heads=base.heads, head_dim=nope + rope, q_lora_rank=r.integer("q_lora_rank", 0),
        kv_lora_rank=r.integer("kv_lora_rank", least=1), qk_rope_head_dim=rope, qk_nope_head_dim=nope,
        v_head_dim=r.integer("v_head_dim", least=1), experts=experts,
        experts_per_token=r.integer("num_experts_per_tok", 1, least=1) if experts > 1 else 1,
        moe_intermediate=moe_inter, shared_experts=shared, shared_intermediate=shared * moe_inter,
        dense_layers=dense if experts > 1 else (),
    )


def _moe(cls: str, arch: ModelFamily, r: _Reader, naming: Naming) -> tuple[ModelFamily, Naming]:
    layers = arch.layers
    experts = r.first(("num_local_experts", "num_experts", "n_routed_experts"), least=2)
    per_token = r.first(("num_experts_per_tok", "experts_per_token"), least=1)
    moe_inter = r.integer("moe_intermediate_size", arch.intermediate)
    intermediate, shared, shared_inter = arch.intermediate, 0, 0
    dense: tuple[int, ...] = ()
    if cls in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
        step = r.integer("decoder_sparse_step", 1, least=1)
        only = set(r.integers("mlp_only_layers"))
        dense = tuple(i for i in range(layers) if i in only or (i + 1) % step)
        shared_inter = r.integer("shared_expert_intermediate_size", 0)
        shared = 1 if shared_inter else 0
        naming = replace(naming, shared="shared_expert")
    elif cls == "Llama4ForCausalLM":
        step = r.integer("interleave_moe_layer_step", 1, least=1)
        dense = tuple(i for i in range(layers) if (i + 1) % step)
        moe_inter = arch.intermediate
        intermediate = r.integer("intermediate_size_mlp", arch.intermediate)
        shared, shared_inter = 1, arch.intermediate
        naming = replace(naming, moe="feed_forward", router="router", shared="shared_expert")
    elif cls == "Step3p7FlashForCausalLM":
        dense = tuple(range(r.integer("first_k_dense_replace", 0)))
        shared = r.integer("n_shared_experts", 0)
        shared_inter = shared * r.integer("share_expert_dim", moe_inter)
        naming = replace(naming, moe="moe", router="gate", shared="share_expert")
    elif cls in ("MixtralForCausalLM", "MiniMaxM2ForCausalLM"):
        naming = replace(naming, moe="block_sparse_moe")
        shared_inter = r.integer("shared_intermediate_size", 0)
        shared = 1 if shared_inter else 0
    elif cls == "GptOssForCausalLM":
        naming = replace(naming, router="router")
    return replace(arch, intermediate=intermediate, experts=experts, experts_per_token=per_token,
                   moe_intermediate=moe_inter, shared_experts=shared, shared_intermediate=shared_inter,
                   dense_layers=dense), naming


# -- parameters ----------------------------------------------------------------------------


def _modules(arch: ModelFamily, naming: Naming) -> Iterator[Module]:
    """Every weight of the language model as vLLM names its modules, with its parameter count."""
    h, p = arch.hidden, naming.prefix
    yield Module(f"{p}embed_tokens", "embedding", arch.vocab * h)
    if not arch.tied_embeddings:
        yield Module(naming.head, "lm_head", arch.vocab * h)
    yield Module(f"{p}norm", "norm", h)
    dense = set(arch.dense_layers)
    for i in range(arch.layers):
        layer = f"{p}layers.{i}."
        yield from _attention(arch, layer)
        yield Module(f"{layer}input_layernorm", "norm", 2 * h)
        if arch.moe and i not in dense:
            yield from _experts(arch, layer + naming.moe + ".", naming)
        else:
            yield Module(f"{layer}mlp.gate_up_proj", "dense", 2 * h * arch.intermediate)
            yield Module(f"{layer}mlp.down_proj", "dense", h * arch.intermediate)


def _attention(arch: ModelFamily, layer: str) -> Iterator[Module]:
    h, attn = arch.hidden, layer + "self_attn."
    if arch.mla:
        heads, qk = arch.heads, arch.qk_nope_head_dim + arch.qk_rope_head_dim
        if arch.q_lora_rank:
            yield Module(f"{attn}q_a_proj", "attention_latent", h * arch.q_lora_rank)
            yield Module(f"{attn}q_a_layernorm", "norm", arch.q_lora_rank)
            yield Module(f"{attn}q_b_proj", "attention", arch.q_lora_rank * heads * qk)
        else:
            yield Module(f"{attn}q_proj", "attention", h * heads * qk)
        latent = arch.kv_lora_rank + arch.qk_rope_head_dim
        yield Module(f"{attn}kv_a_proj_with_mqa", "attention_latent", h * latent)
        yield Module(f"{attn}kv_a_layernorm", "norm", arch.kv_lora_rank)
        yield Module(f"{attn}kv_b_proj", "attention",
                     arch.kv_lora_rank * heads * (arch.qk_nope_head_dim + arch.v_head_dim))
        yield Module(f"{attn}o_proj", "attention", heads * arch.v_head_dim * h)
        return
    q, kv = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
    bias = (q + 2 * kv) if arch.attention_bias else 0
    yield Module(f"{attn}qkv_proj", "attention", h * (q + 2 * kv) + bias)
    out_bias = h if arch.attention_bias and arch.sinks else 0
    yield Module(f"{attn}o_proj", "attention", q * h + out_bias)
    if arch.sinks:
        yield Module(f"{attn}sinks", "norm", arch.heads)
    if arch.architecture in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
        yield Module(f"{attn}qk_norm", "norm", 2 * arch.head_dim)


def _experts(arch: ModelFamily, block: str, naming: Naming) -> Iterator[Module]:
    h, e, inter = arch.hidden, arch.experts, arch.expert_intermediate
    yield Module(f"{block}experts", "experts", e * 3 * h * inter)
    if arch.sinks:  # gpt-oss's experts carry biases, kept in the model dtype
        yield Module(f"{block}experts.bias", "norm", e * (2 * inter + h))
    router_bias = e if arch.sinks else 0
    yield Module(f"{block}{naming.router}", "router", h * e + router_bias)
    if arch.shared_intermediate:
        yield Module(f"{block}{naming.shared}", "shared", 3 * h * arch.shared_intermediate)


def _inactive(arch: ModelFamily, modules: list[Module]) -> int:
    """Parameters a token does not touch: the routed experts it is not sent to."""
    if not arch.moe:
        return 0
    routed = sum(m.params for m in modules if m.role == "experts")
    return routed * (arch.experts - arch.experts_per_token) // arch.experts


def _vision_params(vision: Any) -> int:
    """Approximate parameters of a multimodal encoder from its config: its transformer blocks (attention and MLP)
    and a projector into the language model's width."""
    if not isinstance(vision, Mapping):
        return 0

    def first(*keys: str) -> int:
        for key in keys:
            value = vision.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return 0

    depth = first("depth", "num_hidden_layers", "vt_num_hidden_layers")
    width = first("hidden_size", "vt_hidden_size")
    inner = first("intermediate_size", "vt_intermediate_size")
    out = first("out_hidden_size", "text_hidden_size")
    merge = 4 if vision.get("spatial_merge_size") == 2 or vision.get("merge_kernel_size") == [2, 2] else 1
    projector = width * merge * (width * merge + out) if out else 0
    return depth * (4 * width * width + 2 * width * inner) + projector
