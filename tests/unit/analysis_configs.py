"""Published `config.json` fields of models that are not shipped presets, for the analysis tests."""

QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B
    "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "tie_word_embeddings": False,
}
MIXTRAL_8X7B = {  # mistralai/Mixtral-8x7B-v0.1
    "model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2,
    "vocab_size": 32000, "tie_word_embeddings": False, "sliding_window": None,
}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,  # openai-community/gpt2
        "vocab_size": 50257, "n_inner": None}
GEMMA3_1B = {  # google/gemma-3-1b-pt
    "model_type": "gemma3_text", "hidden_size": 1152, "num_hidden_layers": 26, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912, "vocab_size": 262144,
    "sliding_window": 512, "sliding_window_pattern": 6, "tie_word_embeddings": True,
}
PHI3_MINI = {  # microsoft/Phi-3-mini-4k-instruct
    "model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "intermediate_size": 8192, "vocab_size": 32064, "tie_word_embeddings": False,
    "sliding_window": 2047,
}
QWEN25_05B = {  # Qwen/Qwen2.5-0.5B
    "model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936, "tie_word_embeddings": True,
    "sliding_window": 32768, "use_sliding_window": False, "max_window_layers": 21,
}
