"""Uploads bounded where they arrive: the bytes one network address holds in Gradio's upload folder.

Gradio refuses a file over `Limits.max_upload_bytes` while it arrives (`max_file_size`) and deletes
what it wrote; nothing bounds how many files one client posts to its upload route. `UploadBudget`
is a Starlette middleware on that route (installed on the app Gradio builds: `app_kwargs`): an
address holds at most `Limits.max_upload_bytes_per_address` bytes of uploads at once. An upload
whose announced size (`content-length`) would pass that is refused before it is read; one that
passes it once written (uploads at once, or a size not announced) has its files deleted and is
refused. A file stops counting once it is gone: a saved run is deleted as soon as it is read
(`explorer.ui.handlers.saved.open_saved`), Gradio's cache clean-up deletes the rest within the hour
and when the app stops.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from gradio.utils import get_upload_folder
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from explorer.ui.export import EXPORT_FOLDER_NAME, size_text
from explorer.ui.live import client_address

UPLOAD_ROUTE_SUFFIX = "/upload"  # Gradio's upload route, /gradio_api/upload (Gradio 6)


class UploadBudget(BaseHTTPMiddleware):
    """Refuse (HTTP 413, its files deleted) an upload that would leave its address holding more than
    `most_bytes` bytes of uploads; every other request passes untouched.

    Args:
        app: the ASGI app inside (Starlette passes it).
        most_bytes: the most bytes of uploads one address holds at once.
        proxy_hops: trusted proxies in front of the app (`explorer.ui.live.client_address`).
    """

    def __init__(self, app, most_bytes: int, proxy_hops: int = 0) -> None:
        super().__init__(app)
        self.most_bytes, self.proxy_hops = most_bytes, proxy_hops
        self._held: dict[str, dict[Path, int]] = {}  # address -> its uploaded files still on disk, bytes
        self._lock = threading.Lock()

    async def dispatch(self, request: Request, call_next) -> Response:
        if request.method != "POST" or not request.url.path.endswith(UPLOAD_ROUTE_SUFFIX):
            return await call_next(request)
        address = client_address(request, self.proxy_hops)
        announced_bytes = _int(request.headers.get("content-length"))
        if self.held_bytes(address) + announced_bytes > self.most_bytes:
            return self._refusal()
        response = await call_next(request)
        if response.status_code != 200:
            return response
        body = b"".join([chunk async for chunk in response.body_iterator])
        paths = [Path(path) for path in json.loads(body)]
        if not self._add(address, paths):
            return self._refusal()
        return Response(body, response.status_code, headers=dict(response.headers), media_type=response.media_type)

    def held_bytes(self, address: str) -> int:
        """Bytes of uploads from `address` still on disk (files deleted since no longer count)."""
        with self._lock:
            files = self._held.get(address, {})
            for path in [path for path in files if not path.exists()]:
                del files[path]
            if not files:
                self._held.pop(address, None)
            return sum(files.values())

    def _add(self, address: str, paths: list[Path]) -> bool:
        """Count the new files against `address`; over its budget they are deleted and False returned."""
        sizes = {path: _size(path) for path in paths}
        held_bytes = self.held_bytes(address)
        with self._lock:
            if held_bytes + sum(sizes.values()) <= self.most_bytes:
                self._held.setdefault(address, {}).update(sizes)
                return True
        for path in paths:
            delete_upload(path)
        return False

    def _refusal(self) -> PlainTextResponse:
        return PlainTextResponse(
            f"Your network address already holds {size_text(self.most_bytes)} of uploads here, as much as one "
            "address may hold at once; this file was not kept. Try again once the files sent before are loaded.",
            status_code=413)


def delete_upload(path: str | Path | None) -> None:
    """Delete an uploaded file and its folder where that folder is left empty (Gradio puts each upload
    in a folder of its own, named after its hash). Only a file in Gradio's upload folder, outside the
    exports' folder, is an upload: any other path (an export, a file a caller passed) is left as it is,
    and so is a file already gone."""
    if not path:
        return
    path, uploads = Path(path).resolve(), Path(get_upload_folder()).resolve()
    if uploads not in path.parents or uploads / EXPORT_FOLDER_NAME in path.parents:
        return
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:  # not empty (another upload of the same content), or gone
        pass


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _int(text: str | None) -> int:
    try:
        return max(int(text or 0), 0)
    except ValueError:
        return 0
