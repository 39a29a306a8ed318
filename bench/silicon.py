"""Replay AIConfigurator's end-to-end vLLM runs on Blackwell GPUs through the simulator (shared by the benches).

Each row of `data/aiconfigurator/silicon-blackwell.csv` is one `vllm serve` under a closed-loop client: C clients
each send their next request as soon as the previous one ends, each prompt and each answer (`--ignore-eos`) drawn
uniformly from 0.8 x to 1 x `isl` / `osl` tokens (`RANGE_RATIO`); the server runs with tensor parallelism `tp_size`, attention data parallelism `attention_dp_size` and
the MoE split `moe_tp_size` x `moe_ep_size` (= TP x DP GPUs); `silicon_ttft_ms` and `silicon_tpot_ms` are the
client's mean TTFT and mean TPOT (vLLM's `benchmark_serving` definitions: TPOT of a request = (latency - TTFT) /
(output tokens - 1)).

A row becomes an aisim scenario built as a user builds one (`Scenario.model_validate`): the family of its checkpoint
(`FAMILIES`), the GPU profile of its system, `placement.tensorParallel` / `dataParallel` and
`engine.enableExpertParallel` as the row's `vllm serve` ran them (`launched`), `maxModelLen` = isl + osl, the
`server` entrypoint, and `arrival: {kind: concurrency, clients: C, requests: ROUNDS x C}`. C is `batch_size` x
`attention_dp_size`: each of the 82 rows with DP > 1 names that product in its id (`..._c8_tp2_ep2_...` has batch
size 4 at DP 2), every other row its batch size.

The 82 rows with attention DP > 1 are InferenceMAX's `tp: T, ep: T, dp-attn: true` runs on T GPUs, labelled
`tp_size` T, `attention_dp_size` T, `moe_ep_size` T x T: T x T GPUs, twice the node on the TP 4 rows (a
`b200_sxm` node has 8). What vLLM ran is what InferenceMAX's launch script of the checkpoint makes of that entry
(`launched`): the scripts of MiniMax-M2.5's NVFP4 checkpoint run `--tensor-parallel-size 1 --data-parallel-size T
--enable-expert-parallel` (`DP_ATTENTION_LAUNCH`), the others (MiniMax-M2.5 FP8, Kimi-K2.5 NVFP4) ignore
`dp-attn` and run `--tensor-parallel-size T --enable-expert-parallel`, one engine whose EP group is its T TP ranks
(vLLM's `FusedMoEParallelConfig.make`: EP size = TP x DP). The data agree: all 30 Kimi-K2.5 DP rows carry
(to 0.01 ms) the TTFT and TPOT of a `gap_analysis` row labelled TP 4 EP 4 DP 1 at the same total concurrency, and
the MiniMax-M2.5 FP8 DP rows (ids `..._tp2_ep2_...`) have within 1 % the TPOT of separate TP 2 EP 2 DP 1 runs at the
same concurrency (4 to 256 clients). `--dp-as-labelled` reads the columns literally instead.

The KV cache is FP8 (`engine.kvCacheDtype: fp8`) on the FP8 and FP4 rows, as the data shows: closed loops whose
in-flight context exceeds what a BF16 cache holds yet whose TTFT shows no queueing (MiniMax-M2.5 FP8 at TP 2 on
B200: aisim's BF16 cache holds 433k tokens, 64 clients at 8192 + 1024 keep some 557k in flight, measured TTFT
0.8-0.9 s; at 128 clients, 1.1M in flight, over the FP8 cache's 867k too, TTFT 11.5 s; likewise the NVFP4 checkpoint
on one B300), and the model dtype (`auto`) on the INT4 rows (`KV_CACHE_DTYPE`, `--kv-cache-dtype` to override).

Other assumptions, stated once: every other engine argument at the value of the model's InferenceX recipe where it
sets one (`recipe`: MiniMax-M2.5's token budget of 2 x the input length) and at vLLM's default otherwise; the client
sends `ROUNDS` requests per client (the data does not record the count; 10 x the concurrency is what
InferenceMAX-style sweeps send) and averages over all of them, the first wave included, as `benchmark_serving` does.

A row aisim cannot run is refused with its reason (`Prediction.refused`), never dropped silently.

Results are cached per row in `bench/.cache/silicon/`, keyed by the row's scenario document, the installed fit, the
host terms and a hash of the `aisim` package as imported (code and data), so a second pass over unchanged code costs
nothing.

    python bench/silicon.py [--jobs 2] [--stride N] [--limit N] [--rounds 10] [--no-cache] [--dp-rows]
                            [--dp-as-labelled]
"""

from __future__ import annotations

import argparse
import csv
import gc
import hashlib
import json
import os
import resource
import statistics
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

import aisim
from aisim.engine.simulation import Simulation
from aisim.scenario import Scenario
from aisim.scenario.presets import MODEL_FAMILIES

BENCH = Path(__file__).resolve().parent
DATA = BENCH / "data" / "aiconfigurator" / "silicon-blackwell.csv"
CACHE = BENCH / ".cache" / "silicon"
ROUNDS = 10
"""Requests per client (`vllm bench serve --num-prompts` / `--max-concurrency`); an assumption, see above."""

T = TypeVar("T")

RANGE_RATIO = 0.8
"""The client's `--random-range-ratio`: each prompt and answer length is drawn uniformly between `RANGE_RATIO` x
the row's `isl` / `osl` and the full length (InferenceMAX's client: `benchmark_serving.py --dataset-name random
--random-range-ratio 0.8 --num-prompts 10 x CONC --max-concurrency CONC --ignore-eos`; the Blackwell rows are its
database's runs, their ids its configurations and workflow runs). 1.0: fixed lengths (`--range-ratio`)."""

DP_ATTENTION_LAUNCH = {("MiniMaxAI/MiniMax-M2.5", "nvfp4")}
"""(model_path, gemm_quant_mode) of the checkpoints whose InferenceMAX launch script turns `dp-attn: true` into vLLM's
data-parallel attention: `minimaxm2.5_fp4_b200.sh` / `_b300.sh` (`DP_ATTENTION=true`: `--tensor-parallel-size=1
--data-parallel-size=$TP --enable-expert-parallel`). The FP8 MiniMax-M2.5 scripts (`minimaxm2.5_fp8_b200.sh`,
`_b300.sh`) and Kimi-K2.5's NVFP4 one (`kimik2.5_fp4_b200.sh`) take only `TP` and `EP_SIZE`
(`--tensor-parallel-size=$TP --enable-expert-parallel`)."""
DP_AS_LABELLED = False
"""Whether to read `tp_size` / `attention_dp_size` / `moe_ep_size` literally (`--dp-as-labelled`), not as `launched`
does (read by `launched`; forked workers inherit it)."""

KV_CACHE_DTYPE = {"fp8": "fp8", "fp4": "fp8", "int4": "auto"}
"""The KV-cache dtype per row precision (see above); a precision not listed keeps vLLM's default `auto`."""

RECIPES = True
"""Whether a row runs with the engine arguments of its model's InferenceX recipe (`recipe`); `--no-recipes`: vLLM's
defaults for every row (read by `document`; forked workers inherit it)."""


def recipe(row: Row) -> dict[str, Any]:
    """The engine arguments (scenario keys) that the row's InferenceX recipe sets away from vLLM's defaults.

    MiniMax-M2.5 (`benchmarks/single_node/minimaxm2.5_fp8_b200.sh`, `_fp8_b300.sh`, `_fp4_b200.sh` in
    SemiAnalysisAI/InferenceX, the versions with the `EP_SIZE` / `DP_ATTENTION` switches that the rows with expert
    and attention-data parallelism need): `--max-num-batched-tokens $((ISL * 2))`, `--no-enable-prefix-caching`,
    `--kv-cache-dtype fp8` (`KV_CACHE_DTYPE`) and, on the FP8 checkpoint, `--block-size=32`. The token budget is what
    matters: 2,048 tokens a step at 1,024-token prompts instead of vLLM's 8,192, so a wave of prompts arriving together
    (the closed loop's first) is prefilled in four times as many steps, each carrying every running request's decode
    token. Their `--max-cudagraph-capture-size 2048` and `--stream-interval 20` are not modelled (the first token is
    streamed at once either way). Only on B200 and B300: the same repository's H200 recipe keeps vLLM's defaults.
    Other models keep vLLM's defaults: gpt-oss-120b's recipe sets 8,192 itself; Kimi-K2.5's NVFP4 recipe has a version
    with 2 x ISL and one without, and which one its rows ran is not known; Llama-3.1-70B's was not read."""
    if row.model != "MiniMaxAI/MiniMax-M2.5" or row.system not in ("b200_sxm", "b300_sxm"):
        return {}
    found: dict[str, Any] = {"maxNumBatchedTokens": 2 * row.isl, "enablePrefixCaching": False}
    if row.quant == "fp8":
        found["blockSize"] = 32
    return found


GPUS = {"b200_sxm": "B200", "b300_sxm": "B300", "gb200": "GB200", "gb300": "GB300", "h100_sxm": "H100-SXM",
        "h200_sxm": "H200", "a100_sxm": "A100-80GB", "l40s": "L40S"}
"""AIConfigurator's system names -> aisim GPU profiles (a file of the same columns on other systems runs too)."""
FAMILIES = {
    ("MiniMaxAI/MiniMax-M2.5", "fp8"): "minimax-m2.5",
    ("MiniMaxAI/MiniMax-M2.5", "nvfp4"): "minimax-m2.5-nvfp4",
    ("moonshotai/Kimi-K2.5", "int4_wo"): "kimi-k2.5",
    ("moonshotai/Kimi-K2.5", "nvfp4"): "kimi-k2.5-nvfp4",
    ("meta-llama/Llama-3.1-70B", "fp8"): "llama-3.1-70b-fp8",
    ("meta-llama/Llama-3.1-70B", "nvfp4"): "llama-3.1-70b-nvfp4",
    ("openai/gpt-oss-120b", "nvfp4"): "gpt-oss-120b",
}
"""(model_path, gemm_quant_mode) -> the family of the checkpoint vLLM ran: MiniMax-M2.5's own FP8 (block) checkpoint
and NVIDIA's NVFP4 one; Kimi-K2.5's own INT4 (W4A16) checkpoint and NVIDIA's NVFP4 one; NVIDIA's FP8 and NVFP4
checkpoints of Llama 3.1 70B; gpt-oss-120b's own checkpoint, whose MXFP4 experts AIConfigurator files as `fp4`."""


@dataclass(frozen=True)
class Row:
    """One measured run."""

    id: str
    version: str
    model: str
    system: str
    precision: str
    quant: str
    isl: int
    osl: int
    batch: int
    tp: int
    pp: int
    dp: int
    moe_tp: int
    moe_ep: int
    ttft_ms: float
    tpot_ms: float

    @property
    def gpu(self) -> str:
        return GPUS.get(self.system, self.system)

    @property
    def family(self) -> str:
        try:
            return checkpoint(self.model, self.quant)[0]
        except Refused:
            return f"{self.model} {self.quant}"

    @property
    def concurrency(self) -> int:
        """Clients in the closed loop: `batch_size` x `attention_dp_size` as labelled (the ids' `cN`), whatever `launch`."""
        return self.batch * self.dp

    @property
    def launch(self) -> tuple[int, int, int]:
        """(TP, DP, EP) of the `vllm serve` that measured the row (`launched`)."""
        return launched(self)

    @property
    def gpus(self) -> int:
        tp, dp, _ = self.launch
        return tp * self.pp * dp


def launched(row: Row) -> tuple[int, int, int]:
    """(tensor parallel, data parallel, expert parallel) sizes of the `vllm serve` that measured `row`.

    A row labelled `tp_size` T, `attention_dp_size` T and `moe_ep_size` T x T (MoE TP 1) is InferenceMAX's `tp: T, ep:
    T, dp-attn: true` entry on T GPUs (see the module docstring): TP 1 x DP T with EP T where the checkpoint's launch
    script makes `dp-attn` vLLM's data parallelism (`DP_ATTENTION_LAUNCH`), else TP T with EP T and one engine. Every
    other row (and every row with `--dp-as-labelled`) runs as labelled."""
    t = row.tp
    if (not DP_AS_LABELLED and t > 1 and row.dp == t and row.moe_tp == 1 and row.moe_ep == t * t):
        return (1, t, t) if (row.model, row.quant) in DP_ATTENTION_LAUNCH else (t, 1, t)
    return row.tp, row.dp, row.moe_ep


def rows(path: Path = DATA) -> list[Row]:
    """Every row of the file, in file order."""
    with path.open(newline="") as handle:
        return [Row(r["id"], r["backend_version"], r["model_path"], r["system"], r["precision"], r["gemm_quant_mode"],
                    int(r["isl"]),
                    int(r["osl"]), int(r["batch_size"]), int(r["tp_size"]), int(r["pp_size"]),
                    int(r["attention_dp_size"]), int(r["moe_tp_size"]), int(r["moe_ep_size"]),
                    float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"]))
                for r in csv.DictReader(handle)]


def subsample(data: list[T], stride: int = 1, limit: int | None = None) -> list[T]:
    """Every `stride`-th row (deterministic), at most `limit` of them."""
    picked = data[::max(stride, 1)]
    return picked if limit is None else picked[:limit]


class Refused(Exception):
    """A row aisim cannot run, with the reason."""


def _name(model: str) -> str:
    """A model id compared loosely: its last part, lower case, `Meta-` dropped (AIConfigurator writes
    `meta-llama/Llama-3.1-70B` for the checkpoint aisim files as `Meta-Llama-3.1-70B`)."""
    return model.split("/")[-1].lower().removeprefix("meta-")


def _family_of(model: str) -> str | None:
    return next((name for name, f in MODEL_FAMILIES.items() if f.huggingface_id and
                 _name(f.huggingface_id) == _name(model)), None)


UNQUANTIZED = ("", "bfloat16", "float16", "bf16", "fp16")


def checkpoint(model: str, quant: str) -> tuple[str, str | None]:
    """(family, vLLM `--quantization` or None) of the checkpoint a row ran: `FAMILIES` first; for other rows (a
    `--data` file of other systems) the family of the model id, its `-FP8` / `-NVFP4` / `-FP4` checkpoint, or the
    unquantized one with vLLM's online `--quantization fp8`."""
    if (model, quant) in FAMILIES:
        return FAMILIES[(model, quant)], None
    base = _family_of(model)
    if base is None:
        raise Refused(f"{model} with {quant} weights: no aisim family for that checkpoint")
    own = MODEL_FAMILIES[base].quantization
    if quant in UNQUANTIZED and not own:
        return base, None
    if quant in ("fp8", "fp8_block"):
        if own == "fp8":
            return base, None
        found = _family_of(f"{model}-FP8")
        if found is not None:
            return found, None
        if not own:
            return base, "fp8"
    if quant == "nvfp4":
        found = _family_of(f"{model}-NVFP4") or _family_of(f"{model}-FP4")
        if found is not None:
            return found, None
    if (quant, own) in (("int4_wo", "compressed-tensors"), ("nvfp4", "mxfp4"), ("mxfp4", "mxfp4")):
        return base, None
    raise Refused(f"{model} with {quant} weights: no aisim family for that checkpoint (the model's is {base}, "
                  f"quantized {own or 'not at all'})")


def _lowest(full: int, ratio: float | None) -> int:
    """The shortest length the client draws for `full` (`int(full x ratio)`, at least 1, at most `full`)."""
    return min(max(int(full * (RANGE_RATIO if ratio is None else ratio)), 1), full)


def lengths(full: int, ratio: float | None = None) -> int | str:
    """A length as the client draws it: uniform from `int(full x ratio)` to `full` (the client's `randint`)."""
    low = _lowest(full, ratio)
    return full if low == full else f"{low}-{full}"


def mean_prompt(row: Row, ratio: float | None = None) -> float:
    """The mean prompt length the client draws for the row (`lengths`: uniform integers between the ends)."""
    return (_lowest(row.isl, ratio) + row.isl) / 2


def document(row: Row, rounds: int = ROUNDS, kv_cache_dtype: str | None = None,
             range_ratio: float | None = None) -> dict[str, Any]:
    """The row as a scenario document (what a user would write in YAML)."""
    if row.system not in GPUS:
        raise Refused(f"system {row.system}: no aisim GPU profile")
    family, quantization = checkpoint(row.model, row.quant)
    if row.pp != 1:
        raise Refused(f"pipeline parallel {row.pp}: aisim has no pipeline parallelism")
    if row.moe_tp * row.moe_ep != row.tp * row.dp:
        raise Refused(f"MoE TP {row.moe_tp} x EP {row.moe_ep} is not TP {row.tp} x DP {row.dp}")
    if row.moe_ep > 1 and row.moe_tp > 1:
        raise Refused(f"MoE TP {row.moe_tp} with EP {row.moe_ep}: vLLM's expert parallelism sets the MoE TP to 1")
    tp, dp, ep = row.launch
    placement: dict[str, Any] = {"gpus": ["g"], "tensorParallel": tp}
    if dp > 1:
        placement["dataParallel"] = dp
    engine: dict[str, Any] = {"maxModelLen": row.isl + row.osl,
                              "kvCacheDtype": kv_cache_dtype or KV_CACHE_DTYPE.get(row.precision, "auto")}
    if ep > 1:
        engine["enableExpertParallel"] = True
    if RECIPES:
        engine.update(recipe(row))
    return {
        "apiVersion": "aisim/v1", "kind": "Scenario", "metadata": {"name": row.id}, "seed": 1,
        "gpus": [{"id": "g", "profile": row.gpu, "count": row.gpus}],
        "models": [{"id": "m", "family": family, "placement": placement, "engine": engine,
                    **({"quantization": quantization} if quantization else {})}],
        "workload": {"sources": [{
            "name": "clients", "model": "m", "promptTokens": lengths(row.isl, range_ratio),
            "outputTokens": lengths(row.osl, range_ratio),
            "arrival": {"kind": "concurrency", "clients": row.concurrency, "requests": rounds * row.concurrency},
        }]},
    }


def scenario(row: Row, rounds: int = ROUNDS, kv_cache_dtype: str | None = None,
             range_ratio: float | None = None) -> Scenario:
    """The row as a validated scenario; `Refused` when aisim cannot model it."""
    try:
        return Scenario.model_validate(document(row, rounds, kv_cache_dtype, range_ratio))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise Refused(f"scenario refused at {where}: {first['msg']}") from None


@dataclass(frozen=True)
class Prediction:
    """What the simulated client measured on one row (milliseconds), or why the row was refused."""

    id: str
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    e2e_ms: float = 0.0
    refused: str = ""
    wall_s: float = 0.0


def simulate(row: Row, rounds: int = ROUNDS, kv_cache_dtype: str | None = None) -> Prediction:
    """Run the row's scenario; means over every request, as `benchmark_serving` reports them."""
    started = time.perf_counter()
    try:
        sim = Simulation(scenario(row, rounds, kv_cache_dtype))
        sim.run()
    except Refused as refused:
        return Prediction(row.id, refused=str(refused))
    except ValueError as error:  # a run the engine refuses (e.g. the model does not fit the GPUs)
        return Prediction(row.id, refused=f"run refused: {str(error).splitlines()[0]}")
    done = [r for r in sim.requests if r.outcome == "completed"]
    if len(done) != len(sim.requests):
        failed = next(r for r in sim.requests if r.outcome != "completed")
        return Prediction(row.id, refused=f"{len(sim.requests) - len(done)} of {len(sim.requests)} requests "
                          f"{failed.outcome}: {failed.error}", wall_s=time.perf_counter() - started)
    ttft = statistics.fmean(r.first_token_at - r.arrival for r in done) / 1e6
    tpot = statistics.fmean((r.finished_at - r.first_token_at) / max(r.output - 1, 1) for r in done) / 1e6
    e2e = statistics.fmean(r.finished_at - r.arrival for r in done) / 1e6
    return Prediction(row.id, ttft, tpot, e2e, wall_s=time.perf_counter() - started)


# -- the code hash, the cache and the process pool -------------------------------------------------

HARNESS = 1
"""Bump when `simulate` reads the requests differently (the scenario itself is part of the cache key)."""


HOST_FILE = ("engine", "costmodel", "host.json")
FRONT_END = ("frontend_ns", "frontend_token_ns")
"""The host terms a fit may install itself (`front_end_given`): then the shipped values are no part of its key."""


@cache
def code_hash() -> str:
    """A hash of the simulator's package as imported (code and data) but its fitted host terms (`host_terms`): what,
    with the scenario and the host terms, decides a prediction."""
    digest = hashlib.sha256()
    package = Path(aisim.__file__).resolve().parent  # the package imported, wherever it lies
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if path.relative_to(package).parts == HOST_FILE:
            continue
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def host_terms(front_end_given: bool = False) -> dict[str, float]:
    """The host terms installed in this process, without the front end's where the fit installs those itself."""
    from aisim.engine.costmodel import calibration

    return {k: v for k, v in calibration.host().items() if not (front_end_given and k in FRONT_END)}


def _key(row: Row, rounds: int, fit: str, kv_cache_dtype: str | None = None, front_end_given: bool = False) -> str:
    """The row's scenario document (so a change of the mapping is a miss), the fit, the package's hash and host terms."""
    try:
        described: Any = document(row, rounds, kv_cache_dtype)
    except Refused as refused:
        described = str(refused)
    text = json.dumps([HARNESS, row.id, described, fit, code_hash(), host_terms(front_end_given)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _load(key: str) -> Prediction | None:
    path = CACHE / f"{key}.json"
    try:
        return Prediction(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _store(key: str, prediction: Prediction) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    temporary = CACHE / f"{key}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(asdict(prediction)))
    temporary.replace(CACHE / f"{key}.json")


Install = Callable[[], None]
"""Installs fitted constants in a worker process before it simulates (a picklable, module-level callable)."""


MEMORY_GIB = 5.0
"""Address space a worker may take (`--memory-gib`): the machine is shared, and the largest closed loops (hundreds of
clients x 10 rounds x 8k tokens) can grow a simulation past 10 GB. A row that hits it is refused with the reason."""


OUTGREW = "the simulation outgrew the bench's memory cap"


_CAP = [MEMORY_GIB]


def _cap_memory(gib: float) -> None:
    _CAP[0] = gib
    if gib > 0:
        limit = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _work(args: tuple[Row, int, Install | None, str | None]) -> Prediction:
    row, rounds, install, kv_cache_dtype = args
    if install is not None:
        install()
    try:
        found = simulate(row, rounds, kv_cache_dtype)
    except MemoryError:
        found = Prediction(row.id, refused=f"{OUTGREW} per process (--memory-gib, {_CAP[0]:g} GiB here)")
    gc.collect()  # the simulation's cycles, before the answer is pickled back under the same cap
    return found


def predict(data: Iterable[Row], jobs: int = 2, rounds: int = ROUNDS, use_cache: bool = True,
            install: Install | None = None, fit: str = "shipped",
            kv_cache_dtype: str | None = None, memory_gib: float = MEMORY_GIB,
            front_end_given: bool = False) -> dict[str, Prediction]:
    """Every row's prediction, by row id: from the cache where the same row, rounds, fit and code ran before, else
    simulated in a pool of `jobs` processes (each with `install` run first; `fit` names it in the cache key, and
    `front_end_given` says that it installs both front-end terms, so the shipped ones are no part of the key)."""
    data = list(data)
    found: dict[str, Prediction] = {}
    todo: list[Row] = []
    for row in data:
        hit = _load(_key(row, rounds, fit, kv_cache_dtype, front_end_given)) if use_cache else None
        if hit is not None:
            found[row.id] = hit
        else:
            todo.append(row)
    # the longest runs first, so the pool ends together
    todo.sort(key=lambda r: -(r.concurrency * rounds * (r.isl + r.osl)))
    work = [(row, rounds, install, kv_cache_dtype) for row in todo]
    if work:
        # a fresh pool per call: constants one fold installs never reach another fold's rows
        with ProcessPoolExecutor(max(1, min(jobs, len(work))), initializer=_cap_memory,
                                 initargs=(memory_gib,)) as pool:
            futures = [pool.submit(_work, w) for w in work]
            for row, future in zip(todo, futures):
                try:
                    prediction = future.result()
                except MemoryError:  # raised while the worker sent its answer back
                    prediction = Prediction(row.id, refused=f"{OUTGREW} per process (--memory-gib, {memory_gib:g} GiB)")
                found[row.id] = prediction
                if use_cache and not prediction.refused.startswith(OUTGREW):  # as each row ends (a cap is no answer)
                    _store(_key(row, rounds, fit, kv_cache_dtype, front_end_given), prediction)
    return {row.id: found[row.id] for row in data}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="rows simulated in parallel (default 2)")
    parser.add_argument("--stride", type=int, default=1, help="every N-th row only (deterministic subsample)")
    parser.add_argument("--limit", type=int, help="at most this many rows (after --stride)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"requests per client (default {ROUNDS})")
    parser.add_argument("--no-cache", action="store_true", help="simulate every row again")
    parser.add_argument("--kv-cache-dtype", choices=("auto", "fp8"), help="every row's KV cache (default: by precision)")
    parser.add_argument("--memory-gib", type=float, default=MEMORY_GIB, help="address space per worker (0: no cap)")
    parser.add_argument("--data", type=Path, default=DATA, help="a CSV of the same columns (default: the Blackwell rows)")
    parser.add_argument("--range-ratio", type=float, default=RANGE_RATIO,
                        help=f"the client's length range ratio (default {RANGE_RATIO}; 1: fixed lengths)")
    parser.add_argument("--dp-rows", action="store_true", help="only the rows labelled attention_dp_size > 1")
    parser.add_argument("--dp-as-labelled", action="store_true",
                        help="read tp_size / attention_dp_size / moe_ep_size literally (default: as `launched` reads them)")
    parser.add_argument("--no-recipes", action="store_true",
                        help="vLLM's default engine arguments for every row, not its InferenceX recipe's (`recipe`)")
    args = parser.parse_args()
    globals()["RANGE_RATIO"] = args.range_ratio  # read by `document` (forked workers inherit it)
    globals()["RECIPES"] = not args.no_recipes
    globals()["DP_AS_LABELLED"] = args.dp_as_labelled
    data = subsample([r for r in rows(args.data) if r.dp > 1 or not args.dp_rows], args.stride, args.limit)
    started = time.perf_counter()
    found = predict(data, args.jobs, args.rounds, not args.no_cache, kv_cache_dtype=args.kv_cache_dtype,
                    memory_gib=args.memory_gib)
    print(f"{'id':58} {'gpu':5} {'TP':>2} {'DP':>2} {'EP':>2} {'conc':>4} {'ttft ms':>9} {'sim':>9} "
          f"{'tpot ms':>8} {'sim':>8}")
    for row in data:
        p = found[row.id]
        if p.refused:
            print(f"{row.id:58} REFUSED {p.refused}")
            continue
        tp, dp, ep = row.launch
        print(f"{row.id:58} {row.gpu:5} {tp:2} {dp:2} {ep:2} {row.concurrency:4} {row.ttft_ms:9.1f} "
              f"{p.ttft_ms:9.1f} {row.tpot_ms:8.2f} {p.tpot_ms:8.2f}")
    refused = sum(1 for p in found.values() if p.refused)
    print(f"{len(data) - refused} rows simulated, {refused} refused; wall {time.perf_counter() - started:.1f} s")
    done = [(row, found[row.id]) for row in data if not found[row.id].refused]
    if done:
        for name, pairs in (("TTFT", [(p.ttft_ms, row.ttft_ms) for row, p in done]),
                            ("TPOT", [(p.tpot_ms, row.tpot_ms) for row, p in done])):
            errors = [100 * (got / measured - 1) for got, measured in pairs]
            print(f"{name}: median |error| {statistics.median(abs(e) for e in errors):.1f} %, "
                  f"signed median {statistics.median(errors):+.1f} % ({len(errors)} rows)")


if __name__ == "__main__":
    main()
