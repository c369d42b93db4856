"""Which roofs the roofline view gets: a live run on a device with a datasheet entry gets that
entry and the roofs measured on the device beside it; another machine's entry or a saved run does not."""

from __future__ import annotations

from explorer.analysis.hardware import THIS_MACHINE, hardware_from_dict
from explorer.config import SamplingSettings
from explorer.figures.views import ViewOptions
from explorer.runner import devices, probe
from explorer.runner.session import InferenceSession
from explorer.ui.hosting import LOCAL
from explorer.ui.views import Visit, render, view_data

PROBED = hardware_from_dict(THIS_MACHINE, {
    "name": "This machine (NVIDIA H100 80GB HBM3, measured)", "memory_bytes": [80e9, "torch"],
    "memory_bandwidth_bytes_per_s": [2.9e12, "measured here by torch: copy"],
    "op_overhead_s": [8e-6, "measured here by torch: nn.Linear(1, 1)"],
    "dense_flops_per_s": {"fp32": [50e12, "measured here by torch: fp32 matmul"]}})


def test_a_live_run_on_a_catalogued_device_gets_its_datasheet_and_measured_roofs(model, monkeypatch):
    live = InferenceSession(model, SamplingSettings(max_new_tokens=4))
    live.prefill("Hi there!", use_chat_template=False)
    live.decode_step()
    visit = Visit.start(live, LOCAL)
    probed_on = []
    monkeypatch.setattr(devices, "roofline_hardware_key", lambda device: "h100-sxm")  # as if it ran on an H100
    monkeypatch.setattr(probe, "this_machine", lambda device: probed_on.append(device) or PROBED)
    options = ViewOptions(1, 0, False, "h100-sxm")
    data = view_data(visit, options, "roofline")
    assert (data.hardware.key, data.measured, data.measured_roofs, probed_on) == ("h100-sxm", True, PROBED, ["cpu"])
    figure = render(visit, options, "roofline")
    assert {"roofline", "measured roofline", "decode measured"} <= {t.name for t in figure.data}
    other = view_data(visit, ViewOptions(1, 0, False, "a100-80gb"), "roofline")
    assert (other.measured, other.measured_roofs) == (False, None)  # not the machine it ran on
    saved = Visit.replay(visit.run, visit.attention, LOCAL)
    assert view_data(saved, options, "roofline").measured_roofs is None  # a saved run's device is not here
