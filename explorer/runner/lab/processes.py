"""What the lab's multi-process experiments (tensor, pipeline and expert parallelism) share: the
parent's side (the model saved for the processes, a free loopback port, the processes started by
`torch.multiprocessing` (spawn) and waited for, none left running whatever happens, the unsharded
model's greedy tokens) and each process's side (one thread, a gloo group on that port over loopback,
its collectives warmed up before they are timed, an injected death for tests)."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from transformers import GenerationConfig

from explorer.errors import ExplorerError
from explorer.runner.passes import model_pass

COLLECTIVE_TIMEOUT_S = 120.0  # a process waits this long for the others in a collective or a receive
RUN_TIMEOUT_S = 900.0  # the whole run, start-up included (each process imports torch and loads the model)
FAIL_EXIT_CODE = 17  # the exit code of a process told to die mid-run (a test's injected failure)


def save_model(model, workdir: str) -> Path:
    """Save `model` under `workdir` for the processes to load; returns its folder. One turn on the
    model's lock: no other page's traced pass has wrapped its modules meanwhile."""
    path = Path(workdir) / "model"
    with model_pass(model):
        model.save_pretrained(path)
    return path


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it; rank 0's store binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_ranks(target: Callable, ranks: int, args: tuple, noun: str = "rank",
                run_timeout_s: float = RUN_TIMEOUT_S) -> None:
    """Run `target(rank, *args)` in `ranks` spawned processes and wait for all of them; whatever
    happens, none is left running.

    Args:
        noun: what the error calls a process ("rank", "stage").

    Raises:
        ExplorerError: a process raised or died (torch's launcher then stops the others), or the run
            took longer than `run_timeout_s`.
    """
    context = mp.start_processes(target, args=args, nprocs=ranks, join=False, start_method="spawn")
    deadline = time.monotonic() + run_timeout_s
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise ExplorerError(f"The {ranks} {noun}s did not finish within {run_timeout_s:.0f} s; they were "
                                    "stopped.")
    except ProcessException as exc:
        raise ExplorerError(f"{noun.capitalize()} {exc.error_index} of {ranks} stopped mid-run: {_reason(exc)}. "
                            f"The other {noun}s were stopped and no process of the run is left (exit codes by "
                            f"{noun}: {_exit_codes(context)}).") from None
    finally:
        _stop_all(context.processes)


def reference_tokens(model, prompt_ids: list[int], tokens: int, eos_ids: list[int]) -> list[int]:
    """The unsharded model's greedy tokens in this process: `generate`, no sampling, stopping at an EOS."""
    settings = GenerationConfig(max_new_tokens=tokens, do_sample=False, eos_token_id=eos_ids or None,
                                pad_token_id=(eos_ids or [0])[0])
    ids = torch.tensor([prompt_ids], device=model.device)
    with model_pass(model):  # one turn for the whole generate (local only: no other page shares the model)
        return model.generate(ids, generation_config=settings)[0, len(prompt_ids):].tolist()


def _reason(exc: Exception) -> str:
    """What torch's launcher says of a process that failed, in a line."""
    if isinstance(exc, mp.ProcessExitedException):
        how = f"killed by {exc.signal_name}" if exc.signal_name else f"exited with code {exc.exit_code}"
        return f"its process {exc.error_pid} {how}"
    lines = [line for line in str(getattr(exc, "msg", exc)).splitlines() if line.strip()]
    return f"it raised {lines[-1].strip() if lines else type(exc).__name__}"


def _exit_codes(context) -> str:
    _stop_all(context.processes)
    return ", ".join(f"{rank}: {process.exitcode}" for rank, process in enumerate(context.processes))


def _stop_all(processes) -> None:
    """Terminate every process still alive, then kill what a few seconds did not end; join them all."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()


@contextlib.contextmanager
def joined_group(rank: int, world: int, port: int, timeout_s: float) -> Iterator[None]:
    """In a spawned process: one thread, and a gloo group of `world` processes whose store rank 0
    binds on 127.0.0.1:`port` (gloo's own sockets on loopback too), each collective or receive
    failing after `timeout_s`; the group is destroyed on the way out."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback_interface())
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    try:
        yield
    finally:
        dist.destroy_process_group()


def warm_up_collectives(world: int) -> None:
    """One untimed all-reduce, all-gather and all-to-all of a few bytes on every rank, so the first
    measured collective of each kind does not carry the time the ranks take to meet (one loads its
    model later than another) nor gloo's first-call set-up."""
    dist.all_reduce(torch.zeros(1))
    dist.all_gather_single(torch.zeros(world), torch.zeros(1))
    dist.all_to_all_single(torch.zeros(world), torch.zeros(world))


def _loopback_interface() -> str:
    """The network interface that holds 127.0.0.1 ("lo" on Linux, "lo0" on macOS)."""
    import psutil

    return next(name for name, addresses in psutil.net_if_addrs().items()
                if any(address.address == "127.0.0.1" for address in addresses))


def die_if_asked(env: str, rank: int) -> None:
    """Exit at once with `FAIL_EXIT_CODE`, mid-run, where the environment variable `env` names this
    rank (a test's injected failure)."""
    if os.environ.get(env) == str(rank):
        os._exit(FAIL_EXIT_CODE)
