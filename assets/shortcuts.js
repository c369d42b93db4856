<script>
// A number typed outside a control's range is set to the nearest end before Gradio reads it, so the
// box shows the value the app uses and Gradio refuses nothing. While typing, only a number no further
// keystroke can bring back into range (above the maximum, or negative where the minimum is not) is
// set at once; when the box is left or Enter pressed, any number out of range is.
function clampNumberBox(event, whileTyping) {
  const box = event.target;
  if (!(box instanceof HTMLInputElement) || box.type !== "number" || box.value === "") return;
  const value = Number(box.value);
  const low = box.min === "" ? -Infinity : Number(box.min);
  const high = box.max === "" ? Infinity : Number(box.max);
  if (whileTyping && !(value > high || (value < low && value < 0))) return;
  const clamped = Math.min(Math.max(value, low), high);
  if (clamped !== value) box.value = String(clamped);
}
document.addEventListener("input", (event) => clampNumberBox(event, true), true);
document.addEventListener("change", (event) => clampNumberBox(event, false), true);

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
