<script>
// Numbers out of a control's range never reach Gradio, which would refuse them with a toast, keep the
// box as typed and mark the control's outputs with an error. While typing, a number no keystroke can
// bring back into range (above the maximum, or negative where the minimum is not) is set to the nearest
// end at once, and the start of a number below the minimum (the "0" of "0.7") is held back; when the
// box is left or Enter pressed, a number still out of range is set to the nearest end and sent.
function numberBox(event) {
  const box = event.target;
  if (!(box instanceof HTMLInputElement) || box.type !== "number" || box.value === "") return null;
  const low = box.min === "" ? -Infinity : Number(box.min);
  const high = box.max === "" ? Infinity : Number(box.max);
  return { box, value: Number(box.value), low, high };
}
document.addEventListener("input", (event) => {
  const typed = numberBox(event);
  if (!typed) return;
  const { box, value, low, high } = typed;
  if (value > high || (value < low && value < 0)) box.value = String(Math.min(Math.max(value, low), high));
  else if (value < low) event.stopImmediatePropagation();
}, true);
document.addEventListener("change", (event) => {
  const typed = numberBox(event);
  if (!typed) return;
  const { box, value, low, high } = typed;
  const clamped = Math.min(Math.max(value, low), high);
  if (clamped !== value) {
    box.value = String(clamped);
    box.dispatchEvent(new Event("input", { bubbles: true }));
  }
}, true);

// Keyboard shortcuts (outside text fields): N next token, P prefill, R reset, 1-5 switch views.
document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.isContentEditable)) return;
  const buttons = { n: "decode-btn", p: "prefill-btn", r: "reset-btn" };
  const key = event.key.toLowerCase();
  if (buttons[key]) {
    document.getElementById(buttons[key])?.click();
    event.preventDefault();
    return;
  }
  const tabs = document.querySelectorAll("#views [role='tab']");
  const index = Number(event.key) - 1;
  if (Number.isInteger(index) && index >= 0 && index < tabs.length) {
    tabs[index].click();
    event.preventDefault();
  }
});
</script>
