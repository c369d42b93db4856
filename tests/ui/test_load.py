"""Many visitors at once: 20 `gradio_client` sessions on loopback against one in-process app.

Each session runs the prefill and 10 decode steps with sampling on and its own seed, all sessions
at the same time. Every session must get exactly the tokens its seed gives in a session run alone
(no crosstalk through the shared model, the queue or the per-page state), no request may fail, and
the server must free the sessions afterwards: the live-session count back to 0, every step trace
freed, and the process RSS back near its baseline. A second test closes clients without pressing
Reset and checks that Gradio's unload (fired when a client's heartbeat stream ends) frees them.

Bounded in time: every request and every wait has a timeout, and the heartbeat interval is cut to
0.5 s (Gradio's default is 15 s); the file takes about 50 s on 2 cores, most of it gradio_client's
own overhead per request. Clients and server share this process, so the RSS figures cover both;
glibc's free lists are trimmed before each reading so that RSS counts memory in use, not memory
the allocator kept. Run with `-s` to print the measured figures.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import gc
import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from gradio_client import Client
from served_app import serving, wait_until
from tiny_models import tiny_model

from explorer.config import SamplingSettings
from explorer.runner.session import InferenceSession
from explorer.trace import StepTrace
from explorer.ui.hosting import LOCAL

SESSIONS = 20
STEPS = 10
REQUEST_TIMEOUT_S = 30  # a request waits behind at most 19 others (~0.2 s each) in the model queue
UNLOAD_TIMEOUT_S = 10  # a closed client's heartbeat stream ends within two 0.5 s heartbeats
# A context of 512 and a prompt of about 420 tokens with the chat template, so that each session holds
# ~11 MiB (mostly its prefill attention: 3 layers x 6 heads x n x n float32) and the 20 sessions'
# memory stands well clear of the RSS noise of 20 clients and their threads.
CONTEXT = 512
PROMPT = 4 * ("Twenty people open the explorer in the same lecture room and press Prefill at once; "
              "each must see only their own tokens. ")
SAMPLING = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_new_tokens=64)
# The API inputs this test sets, by control label; every other input is sent as its control's default.
# The model is left at its default, the start-up model.
PREFILL_INPUTS = {"Or any causal LM: hub id or local folder": "", "Prompt": PROMPT, "Use the chat template": True,
                  "System prompt (optional, chat template only)": ""}
SAMPLING_INPUTS = {"Sample (off: greedy)": True, "Temperature": 1.0, "Top-k": 0, "Top-p": 1.0, "Min-p": 0.0,
                   "Max new tokens": 64}
# A generated token's chip on the token strip ("next": chosen by the last step, not yet fed).
GENERATED_ID = re.compile(r'<span class="tok (?:generated|next)[^"]*" title="id (\d+) ')
MIB = 2**20


@dataclasses.dataclass
class Run:
    """What one simulated visitor saw: its client (still open), the ids of the tokens its session
    generated, requests made, seconds taken."""

    client: Client
    ids: list[int]
    requests: int
    seconds: float


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", max_position_embeddings=CONTEXT)


@pytest.fixture(scope="module")
def app(model):
    """The app on a free loopback port, with a 0.5 s heartbeat; yields (url, its `Served`)."""
    with serving(model, LOCAL) as app:
        yield app


def rss_bytes() -> int:
    """This process's resident set size, bytes (Linux /proc), after glibc returns its free memory."""
    gc.collect()
    libc = ctypes.util.find_library("c")
    if libc and hasattr(ctypes.CDLL(libc), "malloc_trim"):
        ctypes.CDLL(libc).malloc_trim(0)
    with open("/proc/self/status", encoding="ascii") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kib * 1024


def live_traces() -> int:
    """Step traces alive in this process (the server's sessions and anything still holding one)."""
    gc.collect()
    return sum(type(obj) is StepTrace for obj in gc.get_objects())


def reference(model, seed: int) -> InferenceSession:
    """A session run alone: the prefill and `STEPS` decode steps (fewer if generation ends) for `seed`."""
    session = InferenceSession(model, SamplingSettings(seed=seed, **SAMPLING))
    session.prefill(PROMPT, use_chat_template=True)
    for _ in range(STEPS):
        if session.finished:
            break
        session.decode_step()
    return session


def array_bytes(value) -> int:
    """Bytes of the numpy arrays reachable from `value` through dataclass fields, lists, tuples and dicts."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if dataclasses.is_dataclass(value):
        return sum(array_bytes(getattr(value, field.name)) for field in dataclasses.fields(value))
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return sum(array_bytes(item) for item in value)
    return 0


def inputs(client: Client, api_name: str, values: dict) -> list:
    """The endpoint's inputs in order: `values[label]` for the controls named there, else the
    control's default (the API lists each input with its control's label and default)."""
    parameters = client.view_api(print_info=False, return_format="dict")["named_endpoints"][api_name]["parameters"]
    return [values[p["label"]] if p["label"] in values else p["parameter_default"] for p in parameters]


def call(client: Client, api_name: str, args: list) -> tuple:
    """One request, bounded in time; raises what the server raised."""
    return client.submit(*args, api_name=api_name).result(timeout=REQUEST_TIMEOUT_S)


def generated_ids(outputs: tuple) -> list[int]:
    """The generated tokens' ids on the token strip (the output holding `class="token-strip"`), in order."""
    strip = next(o for o in outputs if isinstance(o, str) and 'class="token-strip"' in o)
    return [int(i) for i in GENERATED_ID.findall(strip)]


def visit(url: str, seed: int, steps: int = STEPS) -> Run:
    """One visitor: connect, prefill, then up to `steps` decode steps (fewer if generation ends).

    Raises:
        AssertionError: a request failed (the client is closed first).
    """
    start = time.perf_counter()
    client = Client(url, verbose=False, httpx_kwargs={"timeout": REQUEST_TIMEOUT_S})
    sampling = SAMPLING_INPUTS | {"Seed": seed}
    requests = 0
    try:
        outputs = call(client, "/prefill", inputs(client, "/prefill", PREFILL_INPUTS | sampling))
        requests, decode = 1, inputs(client, "/decode", sampling)
        while requests <= steps and "Generation ended" not in outputs[0]:
            outputs = call(client, "/decode", decode)
            requests += 1
    except Exception as exc:
        client.close()
        raise AssertionError(f"session {seed}: request {requests + 1} failed: {exc!r}") from exc
    return Run(client, generated_ids(outputs), requests, time.perf_counter() - start)


def visit_all(url: str, seeds: range, steps: int = STEPS) -> list[Run]:
    """`visit` for each seed, all at once, one thread each; if any fails, the others' clients are
    closed and its error is raised."""
    with ThreadPoolExecutor(len(seeds)) as pool:
        futures = [pool.submit(visit, url, seed, steps) for seed in seeds]
    errors = [future.exception() for future in futures if future.exception() is not None]
    if errors:
        close_all([future.result() for future in futures if future.exception() is None])
        raise errors[0]
    return [future.result() for future in futures]


def close_all(runs: list[Run]) -> None:
    """Close every client at once (each waits for its heartbeat thread, up to 1 s)."""
    with ThreadPoolExecutor(max(1, len(runs))) as pool:
        list(pool.map(lambda run: run.client.close(), runs, timeout=UNLOAD_TIMEOUT_S))


def test_closing_clients_without_reset_frees_their_sessions_through_unload(app):
    url, served = app
    before_live, before_traces = len(served.live), live_traces()
    runs = visit_all(url, range(3), steps=0)
    opened = len(served.live) - before_live
    close_all(runs)
    start = time.perf_counter()
    freed = wait_until(lambda: len(served.live) == before_live, UNLOAD_TIMEOUT_S)
    print(f"\nunload after gradio_client's close(): {len(served.live) - before_live} of 3 sessions left "
          f"{time.perf_counter() - start:.1f} s later")
    assert opened == 3
    assert freed
    # a step's outputs may still be on their way to the closed page when its session is freed
    assert wait_until(lambda: live_traces() == before_traces, UNLOAD_TIMEOUT_S), live_traces() - before_traces


def test_twenty_concurrent_sessions_get_their_own_seeds_tokens_and_reset_frees_them(app, model):
    url, served = app
    alone = [reference(model, seed) for seed in range(SESSIONS)]
    expected = [session.generated for session in alone]
    held_bytes = array_bytes([s.traces for s in alone]) + sum(s.attention.store.kept_bytes for s in alone)
    del alone
    assert len({tuple(ids) for ids in expected}) == SESSIONS  # the seeds do lead apart
    before_live, before_traces, before_rss = len(served.live), live_traces(), rss_bytes()

    start = time.perf_counter()
    runs = visit_all(url, range(SESSIONS))
    wall_s = time.perf_counter() - start
    peak_live, peak_traces, peak_rss = len(served.live), live_traces(), rss_bytes()
    requests, seen = sum(run.requests for run in runs), [run.ids for run in runs]
    try:
        with ThreadPoolExecutor(SESSIONS) as pool:
            resets = list(pool.map(lambda run: call(run.client, "/reset", []), runs, timeout=REQUEST_TIMEOUT_S))
    finally:
        close_all(runs)
    del runs[:]
    after_live, after_traces, after_rss = len(served.live), live_traces(), rss_bytes()

    print(f"\n{SESSIONS} sessions at once, prefill + up to {STEPS} steps: {requests} requests in {wall_s:.1f} s; "
          f"live sessions {before_live}/{peak_live}/{after_live}, step traces {before_traces}/{peak_traces}/"
          f"{after_traces}, RSS {before_rss / MIB:.0f}/{peak_rss / MIB:.0f}/{after_rss / MIB:.0f} MiB "
          f"(before/peak/after Reset and close); the sessions' arrays {held_bytes / MIB:.0f} MiB")
    assert seen == expected, "a session's tokens differ from its seed's tokens run alone"
    assert peak_live - before_live == SESSIONS
    assert peak_traces - before_traces == requests  # one trace per prefill or step, none copied
    assert all(outputs[1] == "" for outputs in resets)
    assert (after_live, after_traces) == (before_live, before_traces)
    assert peak_rss - before_rss > held_bytes  # the sessions' arrays were resident at the peak
    assert after_rss - before_rss < held_bytes / 2  # and at most half their size stays
