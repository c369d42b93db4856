"""Number formats of weights, activations and the KV cache, and their sizes in bits.

Sizes: IEEE 754 (fp32, fp16), bfloat16 (8-bit exponent, 7-bit mantissa), OCP FP8 (E4M3/E5M2),
int8 and int4 integer formats. Quantization scales and zero points (e.g. one fp16 scale per group of
32-128 int4 weights, +0.125 to 0.5 bit per weight) are not counted: the model shows the formats'
own sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.errors import ConfigError

DTYPE_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
# The dtypes a model can be run in, by torch's names (`--dtype`; the runner maps them to torch's dtypes).
RUN_DTYPES = ("float32", "bfloat16", "float16")
DTYPE_CHOICES = ("auto", *RUN_DTYPES)  # auto: bfloat16 on CUDA, float32 on the CPU and MPS

# torch / numpy / HF `torch_dtype` spellings -> the short names above.
_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
            "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8"}


def canonical_dtype(name: str) -> str:
    """The short name ("fp32", "bf16", "fp16", "fp8", "int8", "int4") of a dtype spelling.

    Raises:
        ConfigError: the dtype is not one the cost model knows.
    """
    short = _ALIASES.get(name.lower().removeprefix("torch."), name.lower())
    if short not in DTYPE_BITS:
        raise ConfigError(f"Unknown dtype '{name}'; use one of {', '.join(DTYPE_BITS)}.")
    return short


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype (0.5 for int4).

    Raises:
        ConfigError: unknown dtype.
    """
    return DTYPE_BITS[canonical_dtype(name)] / 8


@dataclass(frozen=True)
class Precision:
    """The storage format of each category of tensor.

    Attributes:
        weights: format of the weight matrices (embedding, projections, LM head). Norm weights and
            biases stay in the activation format, as weight-only quantizers (GPTQ, AWQ) leave them.
        activations: format of activations between operators; matmuls run at this precision.
        kv: format of the KV cache.
    """

    weights: str = "bf16"
    activations: str = "bf16"
    kv: str = "bf16"

    def __post_init__(self) -> None:
        for field_name in ("weights", "activations", "kv"):
            object.__setattr__(self, field_name, canonical_dtype(getattr(self, field_name)))

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight element."""
        return dtype_bytes(self.weights)

    @property
    def activation_bytes(self) -> float:
        """Bytes per activation element."""
        return dtype_bytes(self.activations)

    @property
    def kv_bytes(self) -> float:
        """Bytes per KV-cache element."""
        return dtype_bytes(self.kv)
