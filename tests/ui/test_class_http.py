"""A class of thirty on the hosted app over plain HTTP (tiny Llama, loopback, in-process), at the app's
`--max-sessions 64 --max-sessions-per-address 30`: thirty students behind one school address each get
their prefill and its figure; a thirty-first from that address is refused with a message naming the
address cap; a gradio_client script opening sessions in a loop from another address gets the address
cap and no more; and every student's Next token is still served after it.

The students are `PlainClient`s (tests/served_app.py), each with its own session and the school's
address in `x-forwarded-for`, as a Space's proxy sends it; tests/e2e/test_class_browser.py plays a
smaller class in Chromium pages.
"""

from __future__ import annotations

import json

import pytest
from served_app import PlainClient, serving, status_of
from tiny_models import tiny_model

from explorer.ui.hosting import HOSTED

CLASS = 30
SCHOOL, SCRIPT = "203.0.113.7", "198.51.100.9"
LIMITS = HOSTED.with_room(sessions=64, per_address=CLASS)
PROMPT = {"Prompt": "Hi there!", "Use the chat template": False}
CAP_MESSAGE = f"One network address may hold at most {CLASS} sessions at once"


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", max_position_embeddings=512)


def figures(message: dict) -> list[dict]:
    """The Plotly figures (`{"data": [...], "layout": {...}}`) among a completed step's outputs."""
    return [json.loads(value["plot"]) for value in message["output"]["data"]
            if isinstance(value, dict) and value.get("type") == "plotly"]


def test_a_class_of_thirty_behind_one_address_is_served_and_a_script_cannot_shut_it_out(model):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    with serving(model, LIMITS) as (url, served):
        students = [PlainClient(url, SCHOOL) for _ in range(CLASS)]
        prefills = [student.call("prefill", PROMPT) for student in students]
        assert all("**prefill**" in status_of(message) for message in prefills)
        assert all(figures(message) and figures(message)[0]["data"] for message in prefills)  # each its figure
        assert len(served.live) == CLASS

        late = PlainClient(url, SCHOOL)
        assert CAP_MESSAGE in status_of(late.call("prefill", PROMPT))
        assert len(served.live) == CLASS

        served_to_script, refused = 0, []
        clients = [Client(url, verbose=False, headers={"x-forwarded-for": SCRIPT}) for _ in range(CLASS + 5)]
        for client in clients:  # one script, one session after another
            try:
                client.predict(prompt="Hi there!", use_chat_template=False, custom_model="", api_name="/prefill")
                served_to_script += 1
            except AppError as exc:
                refused.append(str(exc))
        assert served_to_script == CLASS and len(refused) == 5
        assert all(f"at most {CLASS} sessions at once" in message for message in refused)

        decodes = [student.call("decode") for student in students]  # the class goes on
        assert all("**step 1**" in status_of(message) for message in decodes)
        for client in [*clients, *students, late]:
            client.close()
