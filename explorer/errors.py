"""Exceptions a person can act on. Every message says what went wrong and what to do next.

The UI and CLI catch `ExplorerError` and show its message; anything else is a bug.
"""


class ExplorerError(Exception):
    """Base class: an error whose message is meant for the person using the explorer."""


class UsageError(ExplorerError, ValueError):
    """Command-line options that do not fit one another or the model (the CLI's exit code 2, as
    argparse's own usage errors): a layer the model lacks, a flag of the other stage, an empty prompt."""


class UnknownPresetError(ExplorerError, KeyError):
    """A shape-only preset name that the explorer does not ship."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0] if self.args else ""


class ConfigError(ExplorerError, ValueError):
    """A model config that is missing, unreadable, or lacks fields the explorer needs."""


class ModelLoadError(ExplorerError, RuntimeError):
    """A model that cannot be loaded: not cached and hub unreachable, not a causal LM, too large."""


class PromptError(ExplorerError, ValueError):
    """A prompt the model cannot run: empty, or longer than the model's context window."""


class SessionStateError(ExplorerError, RuntimeError):
    """A step asked for in the wrong order: decode before prefill, or after generation ended."""


class SamplingSettingsError(ExplorerError, ValueError):
    """A sampling value out of its range (temperature <= 0, top-p outside (0, 1], ...)."""


class ExportError(ExplorerError, RuntimeError):
    """A run that cannot be exported: past the app's size limit, or the disk full or not writable."""


def first_line(exc: BaseException) -> str:
    """The first line of `exc`'s message, or its class name where it has none (for a one-line report)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
