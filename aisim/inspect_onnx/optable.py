"""What each ONNX op does to a GPU: its category, whether it fuses away, and how it touches memory.

The table is the simulator's reading of an op, so that `aisim inspect` can say where a model's time
goes without running it. Each op belongs to a category; the category sets two properties:

fusable
    True when an optimising runtime (ONNX Runtime's extended level, TensorRT) normally runs the op
    without a kernel of its own: elementwise ops become the epilogue of their producer's kernel
    (Conv+Relu, MatMul+Add+Gelu); inference-mode BatchNormalization folds into the preceding Conv's
    weights; views (Reshape, Squeeze, ...) only rewrite shape metadata; constants and shape ops are
    folded once at load. False for the anchors others fuse into (MatMul, Conv), for ops that need a
    pass of their own over the data (reductions, softmax, pooling, copies, gathers) and for control
    flow. None for unknown ops.
access
    The memory access pattern of its kernel: `compute-bound` (arithmetic per byte is high: matmul,
    convolution, recurrences), `streaming` (each element read and written once, in order),
    `strided` (regular but non-contiguous: windows, transposes, slices, broadcasts),
    `gather/scatter` (data-dependent addresses), `reduction` (many elements to one along an axis),
    `none` (no tensor data is touched: views, shapes, folded constants), `subgraph` (control flow:
    whatever its body does).

Ops outside the default domain (`com.microsoft`, `ai.onnx.ml`, custom domains), model-local
functions, string ops, losses and ImageDecoder are left out on purpose and read as `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_DOMAINS = ("", "ai.onnx")
"""Both spellings of the default ONNX operator domain."""


@dataclass(frozen=True)
class OpBehaviour:
    """How the simulator reads one op type."""

    category: str
    fusable: bool | None
    """True: no kernel of its own on an optimising runtime (see the module docstring); None: unknown."""
    access: str
    """Memory access pattern of its kernel."""


CATEGORIES: dict[str, OpBehaviour] = {
    c.category: c
    for c in (
        OpBehaviour("matmul/gemm", False, "compute-bound"),
        OpBehaviour("convolution", False, "compute-bound"),
        OpBehaviour("attention", False, "compute-bound"),
        OpBehaviour("recurrent", False, "compute-bound"),
        OpBehaviour("signal", False, "compute-bound"),
        OpBehaviour("elementwise", True, "streaming"),
        OpBehaviour("quantization", True, "streaming"),
        OpBehaviour("normalization", False, "reduction"),
        OpBehaviour("reduction", False, "reduction"),
        OpBehaviour("pooling", False, "strided"),
        OpBehaviour("view", True, "none"),
        OpBehaviour("data movement", False, "strided"),
        OpBehaviour("indexing", False, "gather/scatter"),
        OpBehaviour("constant", True, "none"),
        OpBehaviour("random", False, "streaming"),
        OpBehaviour("control flow", False, "subgraph"),
        OpBehaviour("sequence", False, "none"),
    )
}
"""Category defaults; an op's own entry in OVERRIDES wins."""

UNKNOWN = OpBehaviour("unknown", None, "unknown")
"""For ops the table does not know; never guessed from the name."""

_MEMBERS: dict[str, str] = {
    "matmul/gemm": "MatMul Gemm MatMulInteger QLinearMatMul Einsum Det",
    "convolution": "Conv ConvTranspose ConvInteger QLinearConv DeformConv CausalConvWithState",
    "attention": "Attention LinearAttention",
    "recurrent": "LSTM GRU RNN",
    "signal": "DFT STFT",
    "elementwise": (
        "Abs Acos Acosh Add And Asin Asinh Atan Atanh BitCast BitShift BitwiseAnd BitwiseNot BitwiseOr "
        "BitwiseXor Cast CastLike Ceil Celu Clip Cos Cosh Div Dropout Elu Equal Erf Exp Floor Gelu Greater "
        "GreaterOrEqual HardSigmoid HardSwish IsInf IsNaN LeakyRelu Less LessOrEqual Log Max Mean Min Mish "
        "Mod Mul Neg Not Or PRelu Pow Reciprocal Relu Round RotaryEmbedding Selu Shrink Sigmoid Sign Sin "
        "Sinh Softplus Softsign Sqrt Sub Sum SwiGLU Swish Tan Tanh ThresholdedRelu Trilu Where Xor"
    ),
    "quantization": "QuantizeLinear DequantizeLinear DynamicQuantizeLinear",
    "normalization": (
        "BatchNormalization LayerNormalization GroupNormalization InstanceNormalization RMSNormalization "
        "LpNormalization MeanVarianceNormalization LRN Softmax LogSoftmax Hardmax"
    ),
    "reduction": (
        "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum "
        "ReduceSumSquare ArgMax ArgMin CumSum CumProd TopK"
    ),
    "pooling": "MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool GlobalLpPool MaxRoiPool MaxUnpool RoiAlign",
    "view": "Reshape Flatten Squeeze Unsqueeze Identity",
    "data movement": (
        "Transpose Concat Split Slice Pad Tile Expand DepthToSpace SpaceToDepth Resize Upsample ReverseSequence "
        "CenterCropPad Col2Im GridSample AffineGrid"
    ),
    "indexing": (
        "Gather GatherElements GatherND Scatter ScatterElements ScatterND TensorScatter OneHot Compress NonZero "
        "Unique NonMaxSuppression"
    ),
    "constant": "Constant ConstantOfShape Shape Size Range EyeLike HannWindow HammingWindow BlackmanWindow MelWeightMatrix",
    "random": "RandomNormal RandomNormalLike RandomUniform RandomUniformLike Bernoulli Multinomial",
    "control flow": "If Loop Scan SequenceMap",
    "sequence": (
        "SequenceAt SequenceConstruct SequenceEmpty SequenceErase SequenceInsert SequenceLength SplitToSequence "
        "ConcatFromSequence Optional OptionalGetElement OptionalHasElement"
    ),
}

OVERRIDES: dict[str, OpBehaviour] = {
    # Inference-mode BatchNormalization is a per-channel scale and shift that folds into the Conv before it.
    "BatchNormalization": OpBehaviour("normalization", True, "streaming"),
    # A dynamic quantizer first finds the tensor's min and max: a reduction pass of its own.
    "DynamicQuantizeLinear": OpBehaviour("quantization", False, "reduction"),
    # Concatenating or splitting along an axis copies contiguous runs.
    "Concat": OpBehaviour("data movement", False, "streaming"),
    "Split": OpBehaviour("data movement", False, "streaming"),
    "ConcatFromSequence": OpBehaviour("sequence", False, "streaming"),
    "SplitToSequence": OpBehaviour("sequence", False, "streaming"),
    # Interpolation, unfolding and grid sampling read at computed coordinates.
    "Resize": OpBehaviour("data movement", False, "gather/scatter"),
    "Upsample": OpBehaviour("data movement", False, "gather/scatter"),
    "Col2Im": OpBehaviour("data movement", False, "gather/scatter"),
    "GridSample": OpBehaviour("data movement", False, "gather/scatter"),
    "AffineGrid": OpBehaviour("data movement", False, "streaming"),
    # Global pools collapse the spatial axes; RoI ops and unpooling address by data.
    "GlobalAveragePool": OpBehaviour("pooling", False, "reduction"),
    "GlobalMaxPool": OpBehaviour("pooling", False, "reduction"),
    "GlobalLpPool": OpBehaviour("pooling", False, "reduction"),
    "MaxRoiPool": OpBehaviour("pooling", False, "gather/scatter"),
    "RoiAlign": OpBehaviour("pooling", False, "gather/scatter"),
    "MaxUnpool": OpBehaviour("pooling", False, "gather/scatter"),
    # LRN normalises over a window of neighbouring channels.
    "LRN": OpBehaviour("normalization", False, "strided"),
}

OPS: dict[str, OpBehaviour] = {
    op: OVERRIDES.get(op, CATEGORIES[category]) for category, names in _MEMBERS.items() for op in names.split()
}
"""Every mapped op type of the default domain."""


def behaviour(domain: str, op_type: str) -> OpBehaviour:
    """The table's row for an op; `UNKNOWN` outside the default domain or the table."""
    if domain not in DEFAULT_DOMAINS:
        return UNKNOWN
    return OPS.get(op_type, UNKNOWN)
