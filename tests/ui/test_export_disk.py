"""Exports and uploads on disk: repeated exports leave the disk as it was, an export says its size
before it is written, a hosted app bounds it (attention left out, then refused), a full disk is a
clear message with nothing half-written left, and uploads are capped while they arrive.

The app runs in-process on loopback over the tiny Llama, with Gradio's cache folder and the system
temp folder both pointed into the test's own folder, so everything the app writes is counted.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import socket
import tempfile
from dataclasses import replace
from pathlib import Path

import gradio as gr
import httpx
import pytest
from gradio_client import Client
from served_app import PlainClient, build_app, serving, wait_until
from tiny_models import tiny_model

from explorer import saved
from explorer.errors import SessionStateError
from explorer.saved import load_run
from explorer.ui import export, handlers
from explorer.ui.hosting import HOSTED, LOCAL, Served
from explorer.ui.layout import DELETE_CACHE, build_demo, launch_options
from explorer.ui.models import ModelRegistry

PROMPT = "Exports must not fill the disk: each click writes a file that must go again."
SAMPLED = (True, 0.9, 20, 0.95, 0.0, 5, 16)  # do_sample, temperature, top-k, top-p, min-p, seed, max new tokens
VIEW = (0, False, "h100-sxm", "attention")
EXPORTS = 10
MIB = 2**20


class FakeRequest:
    def __init__(self, session_hash="page"):
        self.session_hash, self.query_params = session_hash, {}


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """Gradio's cache folder and the system temp folder, both inside the test's folder."""
    gradio_cache, system_temp = tmp_path / "gradio", tmp_path / "tmp"
    gradio_cache.mkdir()
    system_temp.mkdir()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(gradio_cache))
    monkeypatch.setattr(tempfile, "tempdir", str(system_temp))
    return gradio_cache, system_temp


def disk_bytes(*folders: Path) -> int:
    """Bytes of every file under `folders`."""
    return sum(path.stat().st_size for folder in folders for path in folder.rglob("*") if path.is_file())


def run(served, limits=None, steps=2, page="page"):
    """A live visit: prefill of `PROMPT` and `steps` decode steps."""
    app = handlers.ServedHandlers(served)
    visit, *_ = app.on_prefill_click(FakeRequest(page), None, served.registry.default_choice, "", PROMPT, 17, False,
                                     "", False, False, False, *SAMPLED, *VIEW)
    if limits is not None:
        visit.limits = limits
    for _ in range(steps):
        handlers.on_decode_click(visit, *SAMPLED, *VIEW)
    return visit


def test_ten_exports_through_the_app_leave_the_disk_where_it_started(model, folders):
    demo = build_demo(model)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_options())
    client = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False)
    try:
        start_bytes = disk_bytes(*folders)
        client.predict(prompt=PROMPT, use_chat_template=False, custom_model="", api_name="/prefill")
        sizes = []
        for _ in range(EXPORTS):
            served = client.predict(api_name="/export")
            sizes.append(Path(served["path"]).stat().st_size)
            # the file Gradio serves is the one written: no second copy, no temp file left behind
            assert disk_bytes(*folders) - start_bytes == sizes[-1] > 0
        print(f"\n{EXPORTS} exports of {sizes[0]} bytes: {disk_bytes(*folders) - start_bytes} bytes held after them")
        client.predict(api_name="/reset")
        assert disk_bytes(*folders) == start_bytes
    finally:
        client.close()
        demo.close()
    assert demo.delete_cache == DELETE_CACHE  # Gradio also cleans its cache of what the app put there


def test_uploads_over_the_cap_are_refused_while_they_arrive(model, folders):
    limits = replace(LOCAL, max_upload_bytes=2**20)
    assert launch_options(limits)["max_file_size"] == 2**20
    demo = build_demo(model, limits=limits)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **launch_options(limits))
    try:
        url = f"http://127.0.0.1:{port}/gradio_api/upload"
        big = httpx.post(url, files={"files": ("run.json", io.BytesIO(b"x" * (2 * 2**20)))}, timeout=30)
        small = httpx.post(url, files={"files": ("run.json", io.BytesIO(b"{}"))}, timeout=30)
    finally:
        demo.close()
    assert big.status_code == 413 and "maximum allowed size" in big.text
    assert small.status_code == 200


def test_what_aborted_uploads_and_killed_apps_left_is_removed_and_files_in_use_are_kept(folders):
    gradio_cache, _ = folders
    aborted, in_flight, finished = gradio_cache / "tmpaborted", gradio_cache / "tmpinflight", gradio_cache / "ab12"
    old_export, new_export = (gradio_cache / export.EXPORT_FOLDER_NAME / name for name in ("0ld", "n3w"))
    for folder in (finished, old_export, new_export):
        folder.mkdir(parents=True)
        (folder / "run.json").write_text("{}")
    for path in (aborted, in_flight):
        path.write_bytes(b"x" * 1000)
    long_ago_s = aborted.stat().st_mtime - 2 * export.LEFTOVER_S
    for path in (aborted, old_export):
        os.utime(path, (long_ago_s, long_ago_s))
    assert export.remove_leftovers() == 2
    assert not aborted.exists() and not old_export.exists()
    assert in_flight.exists() and (finished / "run.json").exists() and (new_export / "run.json").exists()


def test_the_size_is_said_before_the_file_is_written(model, folders, monkeypatch):
    served = Served.create(ModelRegistry(model), LOCAL)
    visit = run(served)
    events = []
    monkeypatch.setattr(gr, "Info", lambda message, **kwargs: events.append(("said", message)))
    write = saved.save_run
    monkeypatch.setattr(export, "save_run", lambda *args: events.append(("written", None)) or write(*args))
    path = Path(handlers.on_export_click(visit))
    size_bytes = path.stat().st_size
    (said, message), (written, _) = events
    assert (said, written) == ("said", "written")
    said_kb = re.fullmatch(r"Writing the run as JSON: about (\d+) KB\.", message)
    # the estimate samples the attention matrices the session keeps, which recomputing one can change:
    # two estimates of one run agree within a few KB, not to the byte
    estimated_bytes = export.plan_export(visit).estimated_bytes
    assert said_kb and abs(int(said_kb[1]) * 1024 / estimated_bytes - 1) < 0.01
    assert abs(int(said_kb[1]) * 1024 / size_bytes - 1) < 0.1
    label_kb = re.fullmatch(r"Export run \(JSON, about (\d+) KB\)", handlers.on_export_label(visit)["value"])
    assert label_kb and abs(int(label_kb[1]) * 1024 / estimated_bytes - 1) < 0.01
    assert handlers.on_export_label(None)["value"] == "Export run (JSON)"


def test_a_session_keeping_no_matrix_sizes_its_export_from_a_few_recomputed_rows(model, folders, monkeypatch):
    """A long prompt's session keeps no attention matrix: the export's size is estimated from a few
    query rows of the newest matrix, recomputed one at a time (never the whole [h_q, T, T] matrix,
    over 25 s at 8,180 tokens), and is still within 10% of the file written."""
    served = Served.create(ModelRegistry(model), LOCAL)
    visit = run(served, steps=0)
    source, asked = visit.attention, []
    probs = source.probs
    monkeypatch.setattr(source, "kept", lambda step, layer: False)
    monkeypatch.setattr(source, "probs", lambda step, layer, rows=None, key_factor=1:
                        asked.append(rows) or probs(step, layer, rows, key_factor))
    estimated_bytes = export.plan_export(visit).estimated_bytes
    assert len(asked) > 1 and all(rows is not None and rows[1] - rows[0] == 1 for rows in asked)
    monkeypatch.setattr(gr, "Info", lambda message, **kwargs: None)
    size_bytes = Path(handlers.on_export_click(visit)).stat().st_size
    assert abs(estimated_bytes / size_bytes - 1) < 0.1


def test_a_hosted_export_leaves_attention_out_over_its_cap_and_says_so(model, folders, monkeypatch):
    served = Served.create(ModelRegistry(model), HOSTED)
    probe_visit = run(served)
    full_bytes = export.estimated_bytes(probe_visit)
    bare_bytes = export.estimated_bytes(probe_visit, keep_attention=False)
    assert bare_bytes < full_bytes / 3  # attention is most of the file
    limits = replace(HOSTED, max_export_bytes=(full_bytes + bare_bytes) // 2)
    visit = run(served, limits, page="capped")
    said = []
    monkeypatch.setattr(gr, "Info", lambda message, **kwargs: said.append(message))
    path = handlers.on_export_click(visit)
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    assert "at most" in data["attention_left_out"]
    assert all(record["probs"] is None for trace in data["traces"] for record in trace["attention"])
    assert "attention left out (this explorer writes at most" in said[0]
    assert "attention left out" in handlers.on_export_label(visit)["value"]
    replayed, attention = load_run(path)  # still a saved run the app shows
    assert len(replayed.steps) == len(visit.run.steps)
    with pytest.raises(SessionStateError, match=re.escape(f"({data['attention_left_out']})")):
        attention.probs(0, 0)  # the attention view says why, not "given up to stay within its budget"
    with pytest.raises(gr.Error, match="would export to about .* even without attention"):
        visit.limits = replace(HOSTED, max_export_bytes=bare_bytes // 2)
        handlers.on_export_click(visit)
    assert "over the" in handlers.on_export_label(visit)["value"]


def test_a_hosted_page_says_how_exports_are_bounded(model, folders):
    demo = build_demo(model, limits=HOSTED)
    notes = [block for block in demo.blocks.values() if getattr(block, "elem_id", None) == "export-note"]
    assert len(notes) == 1 and "without its attention" in notes[0].value
    assert not [block for block in build_demo(model).blocks.values() if getattr(block, "elem_id", None) == "export-note"]


def test_a_full_disk_is_a_clear_message_and_leaves_no_half_written_file(model, folders, tmp_path, monkeypatch):
    served = Served.create(ModelRegistry(model), LOCAL)
    visit = run(served)
    real_open = Path.open

    class FullDisk(io.BytesIO):
        """A file on a disk that fills after 1,000 bytes (the real file is written up to there)."""

        def __init__(self, path):
            super().__init__()
            self.file = real_open(path, "wb")

        def write(self, data):
            room = 1000 - self.tell()
            self.file.write(data[:max(room, 0)])
            if len(data) > room:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(data)

        def close(self):
            self.file.close()
            super().close()

    def open_on_full_disk(path, mode="r", *args, **kwargs):
        if "w" in mode and tmp_path in Path(path).parents:
            return FullDisk(path)
        return real_open(path, mode, *args, **kwargs)

    before_bytes = disk_bytes(*folders)
    with monkeypatch.context() as patch:
        patch.setattr(Path, "open", open_on_full_disk)
        with pytest.raises(gr.Error, match=r"Cannot write the run .*No space left on device.*Free some disk space"):
            handlers.on_export_click(visit)
    assert disk_bytes(*folders) == before_bytes
    assert not [path for path in tmp_path.rglob("*") if path.is_file()]
    assert visit.exports == {}


def test_a_closed_client_leaves_no_export_behind(model, folders, monkeypatch):
    """A page (here a gradio_client, which keeps Gradio's heartbeat as a browser tab does) that exports
    and closes: its session is freed and its export deleted, with no Reset."""
    monkeypatch.setenv("GRADIO_HEARTBEAT_INTERVAL", "0.5")
    demo, served = build_app(model, LOCAL)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_options())
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False)
        start_bytes = disk_bytes(*folders)
        client.predict(prompt=PROMPT, use_chat_template=False, custom_model="", api_name="/prefill")
        exported = Path(client.predict(api_name="/export")["path"])
        assert exported.exists() and len(served.live) == 1
        client.close()
        # the session leaves the count, then is closed outside the lock (its export deleted): wait for both
        assert wait_until(lambda: len(served.live) == 0 and not exported.exists(), 30)
        assert disk_bytes(*folders) == start_bytes
    finally:
        demo.close()


def test_the_view_as_html_is_the_figure_on_screen_opens_offline_and_goes_with_the_page(model, folders):
    served = Served.create(ModelRegistry(model), LOCAL)
    visit = run(served)
    start_bytes = disk_bytes(*folders)
    attention = Path(handlers.on_view_html_click(visit, 1, 2, True, "h100-sxm", "attention"))
    page = attention.read_text(encoding="utf-8")
    assert attention.name == "explorer-attention-step-1.html"
    assert "<script src=" not in page and len(page) > 3_000_000  # plotly.js inside: no network needed
    assert '"meta":{"view":"attention","step":1}' in page and "layer 2" in page
    # the sampling view with other settings on screen is the preview the page shows
    other = (True, 0.5, 3, 1.0, 0.0, 5, 16)
    sampling = Path(handlers.on_view_html_click(visit, 2, 0, False, "", "sampling", False, None, None, *other))
    assert "PREVIEW" in sampling.read_text(encoding="utf-8")
    assert not attention.exists()  # the page's previous one is deleted
    visit.close()
    assert not sampling.exists() and disk_bytes(*folders) == start_bytes


def test_uploads_from_one_address_are_bounded_as_they_arrive(model, folders):
    gradio_cache, _ = folders
    limits = replace(HOSTED, max_upload_bytes=2 * MIB, max_upload_bytes_per_address=5 * MIB)
    big = b"x" * (3 * MIB // 2)
    with serving(model, limits) as (url, served):
        upload = f"{url}gradio_api/upload"

        def post(address: str, data: bytes) -> httpx.Response:
            return httpx.post(upload, files={"files": ("run.json", io.BytesIO(data))}, timeout=30,
                              headers={"x-forwarded-for": f"1.2.3.4, {address}"})  # the proxy's entry counts

        # ten large files, no session: three fit the address's 5 MiB, the others are refused and deleted
        answers = [post("10.0.0.1", big + bytes([i])) for i in range(10)]
        assert [a.status_code for a in answers] == [200] * 3 + [413] * 7
        assert "already holds 5.0 MB of uploads" in answers[-1].text
        assert disk_bytes(gradio_cache) <= 5 * MIB
        assert post("10.0.0.2", big).status_code == 200  # another address has its own budget
        assert post("10.0.0.3", b"x" * (3 * MIB)).status_code == 413  # larger than any run the app writes
        print(f"\n10 uploads of 1.5 MiB from one address: {disk_bytes(gradio_cache) / MIB:.1f} MiB on disk after "
              "them and another address's one")
        assert disk_bytes(gradio_cache) <= 5 * MIB + len(big) + 2
        for answer in answers[:3]:  # once read (or deleted), a file no longer counts against its address
            upload_path = Path(answer.json()[0])
            upload_path.unlink()
        assert post("10.0.0.1", big).status_code == 200


def test_a_saved_run_loaded_and_reset_leaves_no_file_behind(model, folders):
    gradio_cache, _ = folders
    with serving(model, HOSTED) as (url, served):
        page = PlainClient(url, "10.0.0.1")
        files = lambda: [path for path in gradio_cache.rglob("*") if path.is_file()]  # noqa: E731
        assert files() == []
        page.call("prefill", {"Prompt": PROMPT, "Use the chat template": False})
        exported = page.call("export")["output"]["data"][0]
        shown = page.http.post(f"{url}gradio_api/run/predict", json={  # what the page runs next: the download button
            "data": [exported], "fn_index": _fn_index(page, "show_download"), "session_hash": page.session_hash})
        assert shown.status_code == 200 and "Download explorer-run-step-0.json" in shown.text
        uploaded = page.http.post(f"{url}gradio_api/upload",
                                  files={"files": ("run.json", open(exported["path"], "rb"))}).json()[0]
        data = {"path": uploaded, "orig_name": "run.json", "meta": {"_type": "gradio.FileData"}}
        dependency = next(d for d in page.config["dependencies"] if d.get("api_name") == "on_import_upload")
        props = {c["id"]: c.get("props", {}) for c in page.config["components"]}
        body = {"data": [data, *(props[i].get("value") for i in dependency["inputs"][1:])], "event_data": None,
                "fn_index": dependency["id"], "session_hash": page.session_hash, "trigger_id": None}
        joined = page.http.post(f"{url}gradio_api/queue/join", json=body)
        assert joined.status_code == 200, joined.text
        assert page.results()[0]["success"]
        assert not Path(uploaded).exists()  # read, then deleted
        assert page.call("reset")["success"]
        # no empty temporary file of Gradio's, no upload, no export
        assert wait_until(lambda: files() == [], 10), files()


def _fn_index(page: PlainClient, name: str) -> int:
    return next(d["id"] for d in page.config["dependencies"] if d.get("api_name") == name)
