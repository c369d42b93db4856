"""Event handlers of the app: thin, one per event, every per-person value in the session state.

A handler takes the components' values, turns them into typed controls once
(`explorer.ui.handlers.controls`), runs the session or redraws a view, and returns the components'
new values by name (`explorer.ui.handlers.outputs.StepOutputs`). Only the view on screen (its tab
selected) is drawn; another view is drawn when its tab is selected, so a step costs one figure, not
seven. Every failure becomes a toast that says what happened and what to do (`explorer.ui.toasts`);
Gradio then leaves every output as it was, so the person's session and the figures on screen are kept.

By event family: `steps` (prefill, next token, run N, branch), `redraw` (a view redrawn without a
step), `saved` (export, share, load a saved run), `experiments`, `served` (the handlers that need the
app's models and live sessions: `ServedHandlers`); the lesson's are in `explorer.ui.lesson`.
"""

from explorer.ui.handlers.controls import (
    PROMPT_INPUTS,
    SAMPLING_FIELDS,
    VIEW_INPUTS,
    WHAT_IF_FIELDS,
    PromptControls,
    SamplingControls,
    ViewControls,
    scenario_from,
)
from explorer.ui.handlers.experiments import (
    APP_EQUIVALENCE_STEPS,
    EQUIVALENCE_EMPTY,
    LAB_EMPTY,
    LAB_PARAM_SLOTS,
    lab_figure,
    lab_menu,
    lab_param_box,
    number_params,
    on_equivalence_click,
    on_equivalence_tab,
    on_lab_click,
    on_lab_select,
)
from explorer.ui.handlers.outputs import (
    EMPTY_VIEW,
    RESTORED_INPUTS,
    STEP_OUTPUT_NAMES,
    STEP_OUTPUTS,
    StepOutputs,
    step_outputs,
)
from explorer.ui.handlers.redraw import (
    model_info,
    on_hardware_change,
    on_lens_stat_change,
    on_sampling_change,
    on_sampling_keystroke,
    on_sink_threshold_change,
    on_step_change,
    on_tab_select,
    on_view_change,
    on_what_if_change,
)
from explorer.ui.handlers.saved import (
    no_export,
    on_export_click,
    on_export_label,
    on_share_click,
    on_view_html_click,
    show_download,
)
from explorer.ui.handlers.served import ServedHandlers
from explorer.ui.handlers.steps import on_branch_click, on_decode_click, on_latest_click, on_run_click

__all__ = [
    "APP_EQUIVALENCE_STEPS", "EMPTY_VIEW", "EQUIVALENCE_EMPTY", "LAB_EMPTY", "LAB_PARAM_SLOTS", "PROMPT_INPUTS", "RESTORED_INPUTS", "SAMPLING_FIELDS",
    "STEP_OUTPUT_NAMES", "STEP_OUTPUTS", "VIEW_INPUTS", "WHAT_IF_FIELDS", "PromptControls", "SamplingControls", "ServedHandlers",
    "StepOutputs", "ViewControls", "lab_figure", "lab_menu", "lab_param_box", "number_params", "model_info", "no_export", "on_branch_click", "on_decode_click",
    "on_equivalence_click", "on_equivalence_tab", "on_lab_click", "on_lab_select", "on_export_click", "on_export_label", "on_hardware_change",
    "on_latest_click", "on_lens_stat_change", "on_run_click", "on_sampling_change", "on_share_click",
    "on_sampling_keystroke", "on_sink_threshold_change", "on_step_change", "on_tab_select", "on_view_change", "on_view_html_click",
    "on_what_if_change", "scenario_from", "show_download", "step_outputs",
]
