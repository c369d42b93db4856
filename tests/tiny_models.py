"""Tiny random models of each traced family, every dimension distinct, and a character tokenizer.

Dimensions (odd on purpose, so a swapped axis fails a shape test): vocab 101, hidden 48, 6 query
heads, 2 KV heads, head_dim 10 (not hidden / heads), 3 layers, intermediate 37, context 160.
GPT-2 names its fields differently and has no KV heads of its own (h_kv = h_q) nor a head_dim field
(d_h = d / h = 8): `GPT2_DIMS`. The mixture-of-experts families route each token to k = 4 of E = 7 experts.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

from explorer.runner.loading import LoadedModel, experts_implementation

VOCAB = 101
DIMS = dict(
    vocab_size=VOCAB, hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=10,
    num_hidden_layers=3, intermediate_size=37, max_position_embeddings=160,
)
GPT2_DIMS = dict(vocab_size=VOCAB, n_embd=48, n_head=6, n_layer=3, n_inner=37, n_positions=160)
FAMILY_EXTRAS = {
    "llama": {},
    "mistral": {"sliding_window": None},
    "qwen2": {},
    "qwen3": {},
    "phi3": {"pad_token_id": 0},
    "gemma3_text": {"query_pre_attn_scalar": 10, "sliding_window": 7, "layer_types": None},
    "gpt2": {},
    # E = 7 experts, k = 4 per token (distinct from every dimension above); Mixtral's experts are
    # intermediate_size (37) wide, Qwen3-MoE's moe_intermediate_size (19), and its layer 1 stays dense.
    "mixtral": {"sliding_window": None, "num_local_experts": 7, "num_experts_per_tok": 4},
    "qwen3_moe": {"num_experts": 7, "num_experts_per_tok": 4, "moe_intermediate_size": 19, "mlp_only_layers": [1]},
}
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)

# How Qwen3's chat template ends the prompt: its `enable_thinking` switch, off, closes an empty think block
# (Qwen3's holds two blank lines; spaces here, since the character tokenizer reads "\n\n" as one <unk>).
QWEN3_CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>  </think>  {% endif %}{% endif %}"
)


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character: <unk>, <eos>, newline and the 95 printable ASCII characters (98 ids)."""
    vocab = {tok: i for i, tok in enumerate(["<unk>", "<eos>", "\n", *string.printable[:95]])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_config(family: str, **overrides):
    """A transformers config of `family` with the tiny dimensions above."""
    dims = GPT2_DIMS if family == "gpt2" else DIMS
    return AutoConfig.for_model(family, **(dims | FAMILY_EXTRAS[family] | overrides))


def tiny_model(family: str, seed: int = 0, **overrides) -> LoadedModel:
    """A tiny random float32 model of `family` on the CPU with the character tokenizer."""
    torch.manual_seed(seed)
    config = tiny_config(family, **overrides)
    model = AutoModelForCausalLM.from_config(config, **experts_implementation(config)).eval()
    model.generation_config = GenerationConfig(eos_token_id=1, pad_token_id=0)
    return LoadedModel(model=model, tokenizer=char_tokenizer(), name=f"tiny-{family}",
                       description=f"tiny random {family}", shape_only=False, device="cpu",
                       eos_token_ids=[1])
