"""Load the model the explorer traces: the embedded default, any HF causal LM, or a config on `meta`.

Every failure a person can fix raises one of the project's exceptions with a message that says
what to do; the checks (causal LM, supported family, fits in free memory) run on the config, before
any weight is read.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError
from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from explorer.config import PRESET_SOURCES, SMOLLM2_PRESET, cache_dir, load_hf_config
from explorer.errors import ConfigError, ModelLoadError, first_line
from explorer.families import traced_family
from explorer.runner import embedded
from explorer.runner.collector import settle
from explorer.runner.configs import transformers_config
from explorer.runner.devices import (
    MEMORY_HEADROOM,
    PLANNED_CONTEXT_TOKENS,
    MemoryNeed,
    Placement,
    dtype_name,
    estimate_weight_bytes,
    free_memory_bytes,
    memory_need,
    pick_device,
    pick_dtype,
    plan_placement,
)
from explorer.runner.embedded import Progress, report
from explorer.runner.loaded import LoadedModel
from explorer.runner.warm_up import warm_up

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_MODEL", "MEMORY_HEADROOM", "LoadedModel", "cache_dir", "estimate_weight_bytes",
           "free_memory_bytes", "load", "load_model", "load_shape_only", "preset_has_tokenizer",
           "resolved_model_config"]

DEFAULT_MODEL = embedded.NAME
HUB_CHECK_TIMEOUT_S = 3.0  # the one look-up of a hub id not in the cache: an answer comes in well under a second


def load(model: str | None = None, config: str | None = None, device: str = "auto", dtype: str = "auto",
         progress: Progress | None = None) -> LoadedModel:
    """The start-up model of the app, the CLI and a notebook: a model by name or path, or a config in
    shape-only mode (the default model if neither); then what is alive is set aside from the garbage
    collector and large tensors get pages of their own (`explorer.runner.collector.settle`).

    Args:
        model: hub id, local folder, or "smollm2-135m-instruct".
        config: preset name or path to a `config.json`, for shape-only mode (`device` and `dtype`
            are then ignored).
        device: "auto", "cpu", "cuda[:index]" or "mps" (see `explorer.runner.devices.pick_device`).
        dtype: "auto", "float32", "bfloat16" or "float16" (see `explorer.runner.devices.pick_dtype`).
        progress: receives a short message per loading phase.

    Raises:
        ConfigError: both `model` and `config` given, or see `load_model` / `load_shape_only`.
        UnknownPresetError, ModelLoadError: see `load_model` / `load_shape_only`.
    """
    if model is not None and config is not None:
        raise ConfigError("Give either a model (to run real weights) or a config (shape-only), not both.")
    loaded = load_shape_only(config) if config is not None else \
        load_model(model or DEFAULT_MODEL, device=device, dtype=dtype, progress=progress)
    settle()
    return loaded


def resolved_model_config(model: str | None = None, config: str | None = None) -> PretrainedConfig:
    """The transformers config of what `load(model, config)` would load, read without any weight, so
    that arguments are checked against it before any model work (a layer number, say).

    The embedded model's is its converted `config.json`; before its first conversion, the
    `smollm2-135m` preset's (the Instruct model is a fine-tune of that base: same dimensions).

    Raises:
        UnknownPresetError, ConfigError, ModelLoadError: as `load` would for the same arguments.
    """
    if config is not None:
        return transformers_config(load_hf_config(config), config)
    name = model or DEFAULT_MODEL
    if name == DEFAULT_MODEL:
        folder = embedded.converted_dir()
        if not embedded.is_converted(folder):
            return transformers_config(load_hf_config(SMOLLM2_PRESET), SMOLLM2_PRESET)
        return _pretrained_config(str(folder), name)
    return _pretrained_config(_source(name), name)


def load_model(name_or_path: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto",
               progress: Progress | None = None,
               max_context_tokens: int = PLANNED_CONTEXT_TOKENS) -> LoadedModel:
    """Load real weights: the embedded default, a hub id (from the local HF cache or the hub), or a folder.

    The device and dtype are chosen by `explorer.runner.devices` ("auto": CUDA in bfloat16, else MPS
    or the CPU in float32; on the CPU bfloat16 where float32 would not fit). The memory need of the
    weights, the KV cache and the attention of `max_context_tokens` is checked against free memory
    first; a model too large for one GPU is spread over all of them where they fit together.
    Attention is transformers' default (SDPA); `trust_remote_code` is never enabled. A model with a
    tokenizer is then warmed up (`explorer.runner.warm_up`: one tiny traced step, thrown away).

    Raises:
        ConfigError: a folder without config.json, an unknown device or dtype, or a family the tracer lacks.
        ModelLoadError: not cached and hub unreachable, not a causal LM, larger than free memory,
            no weights in the folder or weights that cannot be read (a truncated file), a device this
            machine lacks, the embedded GGUF missing, or the embedded model's cache damaged and not
            convertible again (`embedded.ensure_converted`).
    """
    target = pick_device(device)
    if name_or_path == DEFAULT_MODEL:
        folder = embedded.ensure_converted(progress)
        source, description = str(folder), embedded.DESCRIPTION
    else:
        source, description = _source(name_or_path), None
    return _from_pretrained(source, name_or_path, description, target, dtype, max_context_tokens, progress)


def load_shape_only(preset_or_path: str) -> LoadedModel:
    """Instantiate a config on the `meta` device: exact shapes, no weights, no memory.

    Args:
        preset_or_path: a shipped preset name (see `explorer.config.preset_names`) or a path to a
            `config.json` or its folder.

    Returns:
        The model in the config's dtype on `meta`; tokenizer None, except for the smollm2-135m
        preset once the embedded model is converted (same vocabulary).

    Raises:
        UnknownPresetError: neither a preset nor an existing path.
        ConfigError: unreadable config, unknown `model_type`, or a family the tracer lacks.
        ModelLoadError: not a causal LM.
    """
    config = transformers_config(load_hf_config(preset_or_path), preset_or_path)
    _check_supported(config, preset_or_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=config.dtype or torch.float32)
    model.eval().requires_grad_(False)
    # transformers' padding warning (GPT-2, where the config sets pad_token_id and no attention mask is
    # passed) reads the ids to look for the pad id, which meta ids do not have; it only logs a warning
    for module in model.modules():  # the inner model runs it (GPT2Model)
        if isinstance(module, PreTrainedModel):
            module.warn_if_padding_and_no_attention_mask = lambda input_ids, attention_mask: None
    tokenizer = _smollm2_tokenizer() if preset_or_path == SMOLLM2_PRESET else None
    description = (f"{preset_or_path}: shape-only {config.model_type}, {config.num_hidden_layers} layers, "
                   f"{_parameter_count(model) / 1e9:.2f} B parameters, no weights (meta device)")
    return LoadedModel(model, tokenizer, preset_or_path, description, True, "meta",
                       _eos_token_ids(config.eos_token_id, tokenizer), dtype_name(model.dtype))


def _source(name_or_path: str) -> str:
    """A local folder (checked) or a hub id, as `from_pretrained` takes it.

    Raises:
        ConfigError: a web address, a name no file system takes (too long, an unknown user's "~"), the
            path is a file, a folder without config.json, or a path that does not exist.
        ModelLoadError: the name is a shape-only preset.
    """
    if "://" in name_or_path:
        raise ConfigError(f"'{name_or_path}' is a web address; models load from the Hugging Face hub by id or from "
                          "a local folder, never from a URL. Pass a hub id such as Qwen/Qwen3-0.6B.")
    path, kind = _path_kind(name_or_path)
    if kind == "dir":
        if not (path / "config.json").is_file():
            raise ConfigError(f"The folder {path} has no config.json. Point to a folder written by "
                              "save_pretrained (config.json and *.safetensors), or pass a hub id.")
        return str(path)
    if kind == "file":
        raise ConfigError(f"{path} is a file; pass the folder holding config.json and the weights, "
                          "or use --config for a shape-only run from a config.json.")
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise ConfigError(f"No folder {path}. Check the path, or pass a hub id such as Qwen/Qwen3-0.6B.")
    if name_or_path in PRESET_SOURCES:
        raise ModelLoadError(f"'{name_or_path}' is a shape-only preset: run it with --config {name_or_path}, "
                             f"or load its weights with --model {PRESET_SOURCES[name_or_path]}.")
    return name_or_path


def _path_kind(name_or_path: str) -> tuple[Path, str | None]:
    """The path `name_or_path` names ("~" expanded) and whether it is a "dir", a "file" or neither (None).

    Raises:
        ConfigError: a name that cannot be a path here (too long, a "~user" with no home folder).
    """
    try:
        path = Path(name_or_path).expanduser()
        kind = "dir" if path.is_dir() else "file" if path.is_file() else None
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"'{name_or_path[:80]}' is neither a folder here nor a hub id ({first_line(exc)[:80]}). "
                          "Pass a hub id such as Qwen/Qwen3-0.6B, or the path of a model folder.") from exc
    return path, kind


def _pretrained_config(source: str, name: str):
    """The model's config, from the folder, the local HF cache or the hub; remote code never runs.

    A hub id not in the cache is first looked up on the hub once, briefly (`_check_on_hub`): offline,
    transformers' download would retry for about 30 s before saying so.

    Raises:
        ModelLoadError: not cached and the hub off, unreachable or without the model, or a config
            transformers cannot read.
    """
    try:
        config = _cached_config(source)
        if config is not None:
            return config
        _check_on_hub(name)
        return AutoConfig.from_pretrained(source, trust_remote_code=False)
    except BrokenPipeError:  # the output's reader went away (a progress line): not the model's fault
        raise
    except OSError as exc:
        raise ModelLoadError(
            f"Cannot find '{name}': it is not a local folder, not in the Hugging Face cache, and the hub "
            f"could not be reached or has no such model ({first_line(exc)}). {_fetch_advice(name)}"
        ) from exc
    except (ValueError, KeyError) as exc:
        raise ModelLoadError(
            f"transformers cannot read the config of '{name}' without running its own code "
            f"({first_line(exc)}); remote code is never run. Pick a model transformers supports natively."
        ) from exc


def _cached_config(source: str):
    """The config from the folder or the local HF cache, never the network; None for a hub id not cached.

    Raises:
        OSError: a folder whose config.json cannot be read. ValueError, KeyError: as `AutoConfig`.
    """
    try:
        return AutoConfig.from_pretrained(source, trust_remote_code=False, local_files_only=True)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError) or Path(source).is_dir():
            raise
        return None


def _check_on_hub(name: str) -> None:
    """Ask the hub once, within `HUB_CHECK_TIMEOUT_S`, whether it has the model `name` (huggingface_hub's
    `model_info`, which does not retry), so that no network, no hub or no such model is said at once.

    Raises:
        ModelLoadError: the hub is off here (`HF_HUB_OFFLINE`), could not be reached, has no model of
            that name (or it is private and no token here gives access), or the name is no hub id.
    """
    from huggingface_hub import constants, model_info
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    where = f"Cannot find '{name}': it is not a local folder and not in the Hugging Face cache"
    if constants.HF_HUB_OFFLINE:
        raise ModelLoadError(f"{where}, and the hub is off here (HF_HUB_OFFLINE=1). {_fetch_advice(name)}")
    try:
        model_info(name, timeout=HUB_CHECK_TIMEOUT_S)
    except RepositoryNotFoundError as exc:
        raise ModelLoadError(f"{where}, and the Hugging Face hub has no model of that name (or it is private and "
                             "no token here gives access). Check the id, e.g. Qwen/Qwen3-0.6B.") from exc
    except HFValidationError as exc:
        raise ModelLoadError(f"Cannot find '{name}': it is neither a local folder nor a hub id "
                             f"({first_line(exc)}). Pass a hub id such as Qwen/Qwen3-0.6B.") from exc
    except Exception as exc:  # noqa: BLE001 - whatever the hub's HTTP client raises for a lost connection
        raise ModelLoadError(f"{where}, and the Hugging Face hub could not be reached within "
                             f"{HUB_CHECK_TIMEOUT_S:g} s ({first_line(exc)}). {_fetch_advice(name)}") from exc


def _fetch_advice(name: str) -> str:
    return (f"Download it where there is network (`hf download {name}`), pass a local folder, or run "
            "shape-only with --config.")


def experts_implementation(config) -> dict[str, str]:
    """Load arguments that make a mixture-of-experts model run transformers' eager experts (the modeling
    file's loop over the experts that received tokens, what the trace shows and its routing counts);
    {} for a dense model. Its default, "grouped_mm", is one fused kernel and refuses some shapes on the CPU."""
    return {"experts_implementation": "eager"} if traced_family(config.model_type).moe else {}


def _check_supported(config, name: str) -> None:
    """Check that `config` describes a causal LM of a family the tracer supports.

    Raises:
        ModelLoadError: not a causal LM (no causal-LM class, or only non-causal architectures listed).
        ConfigError: a causal LM of a family the tracer does not support.
    """
    architectures = getattr(config, "architectures", None) or []
    causal = type(config) in MODEL_FOR_CAUSAL_LM_MAPPING and (
        not architectures or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures))
    if not causal:
        raise ModelLoadError(
            f"'{name}' is not a causal language model "
            f"({config.model_type}, {architectures or 'no causal-LM class'}): "
            "the explorer traces next-token generation only. Pick a decoder-only model such as Qwen/Qwen3-0.6B."
        )
    traced_family(config.model_type)


def _from_pretrained(source: str, name: str, description: str | None, device: str, dtype: str,
                     max_context_tokens: int, progress: Progress | None) -> LoadedModel:
    """Check the config and the memory plan, then load weights and tokenizer from a folder or the hub.

    Raises:
        ConfigError, ModelLoadError: as `load_model`.
    """
    report(progress, f"Reading the config of {name}")
    config = _pretrained_config(source, name)
    _check_supported(config, name)
    need, placement = _plan(config, device, dtype, max_context_tokens, name)
    report(progress, f"Loading {need.weight_bytes / 2**20:.0f} MiB of {dtype_name(need.dtype)} weights onto "
                     f"{placement.device_map}")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            source, config=config, dtype=need.dtype, device_map=placement.device_map,
            max_memory=placement.max_memory, trust_remote_code=False, **experts_implementation(config))
    except BrokenPipeError:  # the output's reader went away (transformers' progress bar): the weights are fine
        raise
    except (OSError, SafetensorError) as exc:  # SafetensorError: a truncated or garbled .safetensors file
        raise ModelLoadError(f"'{name}' has a config but its weights cannot be read ({first_line(exc)}). "
                             "Re-download it, or run shape-only with --config.") from exc
    model.eval().requires_grad_(False)
    report(progress, f"Loading the tokenizer of {name}")
    tokenizer = _tokenizer_or_none(source)
    if description is None:
        description = f"{name}: {config.model_type}, {_parameter_count(model) / 1e6:.0f} M parameters"
    description += f", on {_placed_on(model)} in {dtype_name(need.dtype)}"
    eos_ids = _eos_token_ids(model.generation_config.eos_token_id, tokenizer)
    input_device = str(model.get_input_embeddings().weight.device)
    loaded = LoadedModel(model, tokenizer, name, description, False, input_device, eos_ids, dtype_name(need.dtype))
    warm_up(loaded, progress)
    return loaded


def _plan(config, device: str, dtype: str, max_context_tokens: int, name: str) -> tuple[MemoryNeed, Placement]:
    """The dtype's memory need and where it fits; "auto" on the CPU falls back to bfloat16 where
    float32 does not fit.

    Raises:
        ConfigError: see `pick_dtype`.
        ModelLoadError: it fits nowhere (the message of the dtype tried last).
    """
    need = memory_need(config, pick_dtype(device, dtype), max_context_tokens)
    try:
        return need, plan_placement(need, device, name)
    except ModelLoadError:
        if dtype != "auto" or device != "cpu":
            raise
    need = memory_need(config, torch.bfloat16, max_context_tokens)
    return need, plan_placement(need, device, name)


def _placed_on(model: torch.nn.Module) -> str:
    """"cuda:0", or "cuda:0, cuda:1 (spread by accelerate)" for a model over several devices."""
    devices = sorted({str(p.device) for p in model.parameters()})
    return devices[0] if len(devices) == 1 else f"{', '.join(devices)} (spread by accelerate)"


def _tokenizer_or_none(source: str) -> PreTrainedTokenizerBase | None:
    """The tokenizer saved with the model, or None when there is none (prompts are then token counts)."""
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    except BrokenPipeError:
        raise
    except (OSError, ValueError, TypeError) as exc:
        logger.warning("No tokenizer for %s (%s); prompts will be token counts.", source, exc)
        return None


def preset_has_tokenizer(name: str) -> bool:
    """Whether the shape-only preset `name` gets a tokenizer here, so takes a text prompt: only SmolLM2,
    whose vocabulary is the embedded model's, once that is converted. The others take a prompt length."""
    return name == SMOLLM2_PRESET and embedded.is_converted(embedded.converted_dir())


def _smollm2_tokenizer() -> PreTrainedTokenizerBase | None:
    """The embedded model's tokenizer if already converted (never converts), else None."""
    folder = embedded.converted_dir()
    return AutoTokenizer.from_pretrained(folder) if embedded.is_converted(folder) else None


def _eos_token_ids(eos_token_id: int | list[int] | None, tokenizer) -> list[int]:
    """The generation config's EOS ids, then the tokenizer's, without repeats, in that order."""
    ids = embedded.token_id_list(eos_token_id)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return list(dict.fromkeys(ids))


def _parameter_count(model: torch.nn.Module) -> int:
    """Number of parameter elements; a tied embedding / LM head matrix counts once."""
    return sum(p.numel() for p in model.parameters())
