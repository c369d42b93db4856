<script>
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
