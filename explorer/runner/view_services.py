"""The runner's services to the views (`explorer.figures.view_types.ViewServices`): the roofline's
machines and the probe, and sampling re-run on stored logits.

Each imports its runner module on first use, not with this one: the app serves its page before torch
and transformers are imported (they load with the model behind it), and a saved run's views need
torch only for a sampling preview or a measured machine.
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.hardware import Hardware
from explorer.config import SamplingSettings
from explorer.figures.view_types import ViewServices
from explorer.trace import SamplingRecord


def _resolve_hardware(name_or_path: str, device: str) -> Hardware:
    from explorer.runner.probe import resolve_hardware

    return resolve_hardware(name_or_path, device)


def _measured_roofs(device: str) -> Hardware:
    from explorer.runner.probe import this_machine

    return this_machine(device)


def _hardware_key(device: str) -> str:
    from explorer.runner.devices import roofline_hardware_key

    return roofline_hardware_key(device)


def _resample(logits: np.ndarray, input_ids: list[int], settings: SamplingSettings, seed: int) -> SamplingRecord:
    from explorer.runner.sampling import resample

    return resample(logits, input_ids, settings, seed)


RUNNER_SERVICES = ViewServices(resolve_hardware=_resolve_hardware, measured_roofs=_measured_roofs,
                               hardware_key=_hardware_key, resample=_resample)
