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

// Gradio may add this script to the page after the page has loaded (DOMContentLoaded then is past).
function whenReady(start) {
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
}

// The app keeps Gradio's light theme: its Plotly figures are drawn on white, and a dark page around
// them (the system's dark mode, or ?__theme=dark) would leave them glaring and some text unreadable.
// Gradio marks either with the class "dark" on <body>; it is taken off at once, and again whenever
// it comes back (a change of the system's colour scheme).
(() => {
  const light = () => document.body.classList.contains("dark") && document.body.classList.remove("dark");
  const pin = () => {
    light();
    new MutationObserver(light).observe(document.body, { attributes: true, attributeFilter: ["class"] });
  };
  whenReady(pin);
})();

// Figures first: the figure of the view on screen fills the window's height below its top (in full
// screen, the screen's: the views with their tabs; F, or each figure's button), so it is whole on
// screen without scrolling at any window size. A figure is laid out by its view for its own height and
// the page's width (its text keeps its size, so drawn shorter its labels would run into each other): in
// a room shorter than that (at least MIN_FIGURE_PX) it is drawn at its own height, as much wider, and
// scaled down to the room (a CSS transform, which Plotly's hover and zoom follow), as it is in a room
// narrower than a view's --figure-min-width; in a taller room it is drawn taller. The fit is set before
// Plotly draws a figure (no second draw) and again when the room changes (a resize, the lesson's
// panel, the token strip's rows, full screen): at once where an element above the figure changes its
// height, and checked four times a second. The height it takes is
// the CSS variable --figure-height, which bounds the text boxes beside a figure (the lab's).
const MIN_FIGURE_PX = 360;
const FIT_MARGIN_PX = 12;  // under the figure: its block's padding
function shownFigure() {
  return [...document.querySelectorAll("#views .js-plotly-plot")].find((e) => e.offsetParent !== null) || null;
}
// How `element` (a figure's div, drawn or about to be, laid out for `ownHeight` px) fits its room:
// {scale, width and height: drawn, shown: the height on screen}; null for one not on screen (a hidden
// tab's). The room's top is the top of the first figure in its block (while Gradio swaps a figure's
// element, the new one sits under the old one for a moment).
function figureFit(element, ownHeight) {
  const block = element.closest(".block");
  const holder = element.parentElement;
  if (!block || !holder || holder.offsetParent === null || !ownHeight) return null;
  const first = block.querySelector("[data-testid='plotly']") || element;
  const screen = document.fullscreenElement;
  const top = screen && screen.contains(element)
    ? first.getBoundingClientRect().top - screen.getBoundingClientRect().top
    : first.getBoundingClientRect().top + window.scrollY;
  const room = Math.max(MIN_FIGURE_PX, Math.floor(window.innerHeight - top - FIT_MARGIN_PX));
  const least = parseFloat(getComputedStyle(element).getPropertyValue("--figure-min-width")) || 0;
  const width = holder.clientWidth;
  const scale = Math.min(room / ownHeight, least ? width / least : Infinity, 1);
  const height = scale < 1 ? ownHeight : room;
  return { scale, width: Math.floor(width / scale), height, shown: Math.floor(height * scale) };
}
function placeFigure(element, fit) {
  Object.assign(element.style, { transform: `scale(${fit.scale})`, transformOrigin: "0 0", width: `${fit.width}px` });
  Object.assign(element.parentElement.style, { height: `${fit.shown}px`, overflow: "hidden" });
  document.documentElement.style.setProperty("--figure-height", `${fit.shown}px`);
}
function fitFigure(figure) {
  if (!figure || !figure.layout || !window.Plotly) return;
  const fit = figureFit(figure, Number(figure.dataset.ownHeight) || figure.layout.height);
  if (!fit) return;
  placeFigure(figure, fit);
  if (Math.abs((figure.layout.width || 0) - fit.width) > 1 || Math.abs((figure.layout.height || 0) - fit.height) > 1) {
    window.Plotly.relayout(figure, { width: fit.width, height: fit.height });
  }
}
window.explorerFullscreen = () => {
  if (document.fullscreenElement) return document.exitFullscreen();
  const views = document.getElementById("views");
  return views && views.requestFullscreen ? views.requestFullscreen() : undefined;
};
document.addEventListener("fullscreenchange", () => fitFigure(shownFigure()));
window.addEventListener("resize", () => fitFigure(shownFigure()));
// The room changes as soon as anything above the figure changes its height (the status line and the
// token strip's rows as a step's tokens arrive, after its figure is drawn): every element above the
// figure is watched, and the figure refitted before the next paint.
const roomWatch = new ResizeObserver(() => fitFigure(shownFigure()));
const watchedAbove = new WeakSet();
function watchRoom(figure) {
  for (let node = figure; node && node !== document.body; node = node.parentElement) {
    for (let above = node.previousElementSibling; above; above = above.previousElementSibling) {
      if (!watchedAbove.has(above)) {
        watchedAbove.add(above);
        roomWatch.observe(above);
      }
    }
  }
}
whenReady(() => setInterval(() => {
  const figure = shownFigure();
  watchRoom(figure);
  fitFigure(figure);
}, 250));

// A zoom or pan survives the next step. Gradio 6 draws each new figure in a new plot element (its
// Plot component is keyed on the value), so Plotly's own layout.uirevision, which keeps what a person
// changed across Plotly.react on the same element, has nothing to keep. So each figure's axis ranges
// that a person set (zoom, pan; a double-click's autoscale clears them) are remembered here with the
// figure's uirevision (per model, layer, view and presenter mode: set by explorer/figures), and set
// again on the next figure drawn in that place with the same uirevision.
const keptZoom = {};  // plot elem_id -> {revision, ranges: {xaxis2: [a, b], ...}}
const AXIS_KEY = /^([xy]axis\d*)\.(range|autorange)/;
function plotId(figure) {
  const block = figure.closest("#views .block[id]");
  return block ? block.id : null;
}
function rememberZoom(figure, change) {
  const id = plotId(figure);
  const revision = figure.layout && figure.layout.uirevision;
  if (!id || revision === undefined || revision === null || !change) return;
  const axes = new Set(Object.keys(change).map((key) => (key.match(AXIS_KEY) || [])[1]).filter(Boolean));
  if (!axes.size) return;  // not a zoom or pan (a resize, a fitted height)
  const kept = keptZoom[id] && keptZoom[id].revision === revision ? keptZoom[id] : { revision, ranges: {} };
  for (const axis of axes) {
    const full = figure._fullLayout && figure._fullLayout[axis];
    if (!full || full.autorange) delete kept.ranges[axis];
    else kept.ranges[axis] = full.range.slice();
  }
  keptZoom[id] = kept;
}
function restoreZoom(figure) {
  if (!figure || !figure.on) return;
  if (!figure.dataset.zoomWatched) {
    figure.dataset.zoomWatched = "1";
    figure.on("plotly_relayout", (change) => rememberZoom(figure, change));
  }
  const id = plotId(figure);
  const kept = id && keptZoom[id];
  if (!kept) return;
  if (kept.revision !== figure.layout.uirevision) {
    delete keptZoom[id];  // another model, layer or view: the figure's own ranges
    return;
  }
  const update = {};
  for (const [axis, range] of Object.entries(kept.ranges)) update[`${axis}.range`] = range;
  if (Object.keys(update).length) window.Plotly.relayout(figure, update);
}
// A click on a node pins its hover text in the figure's top-left corner (on a projector nobody
// hovers); a click on the same node again removes it, on another node replaces it. The next step's
// figure starts without it.
function pinOnClick(figure) {
  if (!figure || !figure.on || figure.dataset.pins) return;
  figure.dataset.pins = "1";
  figure.on("plotly_click", (event) => {
    const point = event.points && event.points[0];
    const text = point && (point.hovertext || (point.data.hovertext || [])[point.pointNumber]);
    if (!text) return;
    const notes = figure.layout.annotations || [];
    const pinned = notes.find((note) => note.name === "pinned");
    const kept = notes.filter((note) => note.name !== "pinned");
    if (!pinned || pinned.text !== text) {
      kept.push({ name: "pinned", text, xref: "paper", yref: "paper", x: 0, y: 1, xanchor: "left", yanchor: "top",
                  align: "left", showarrow: false, bgcolor: "rgba(255,255,255,0.97)", bordercolor: "#57606a",
                  borderwidth: 1, borderpad: 6, font: { family: "monospace", size: 13, color: "#24292f" } });
    }
    window.Plotly.relayout(figure, { annotations: kept });
  });
}
// Gradio's Plot component is keyed on its value: each new figure is drawn into a new element, just
// after the component it replaces has drawn the same figure into the old element, which then leaves the
// page (Plotly's data, listeners and drawing left on it). So a redraw of an element that already holds
// a figure waits until the end of that swap: an element still on the page is drawn then (a few ms
// late), one that has left is freed instead of drawn (the old element's draw was a third to a half of
// a Next-token click's time in the browser).
function redrawAfterSwap(plotly, react, self, element, args) {
  return new Promise((resolve) => setTimeout(() => {
    if (element.isConnected) resolve(react.apply(self, args));
    else resolve(plotly.purge(element));
  }, 0));
}
function watchPlotly(plotly) {
  if (!plotly || plotly.explorerWatched || typeof plotly.react !== "function") return;
  const react = plotly.react;
  plotly.react = function (figure, ...rest) {
    const element = typeof figure === "string" ? document.getElementById(figure) : figure;
    const layout = rest[1];
    if (element && layout) {
      const own = layout.height || 450;  // Plotly's default height
      const fit = figureFit(element, own);
      element.dataset.ownHeight = String(own);
      if (fit) {
        placeFigure(element, fit);
        watchRoom(element);
        Object.assign(layout, { width: fit.width, height: fit.height });
      }
    }
    const drawn = element && element._fullLayout && element.isConnected
      ? redrawAfterSwap(plotly, react, this, element, [figure, ...rest])
      : react.call(this, figure, ...rest);
    Promise.resolve(drawn).then(() => {
      if (!element || !element.isConnected) return;
      restoreZoom(element);
      pinOnClick(element);
    });
    return drawn;
  };
  plotly.explorerWatched = true;
}
(() => {
  // Gradio loads plotly.js when the first figure is drawn and sets window.Plotly then
  let plotly = window.Plotly;
  watchPlotly(plotly);
  Object.defineProperty(window, "Plotly", {
    configurable: true,
    get: () => plotly,
    set: (value) => { plotly = value; watchPlotly(value); },
  });
})();

// The token strip keeps the step shown in sight: its height is capped, so it scrolls to the step's
// last token (and the chosen token after it). The tokens then above its top (the prompt's start) are
// counted in its block's data-above attribute and --tokens-above, and the legend under it says so
// (app.css), until the strip is scrolled back up.
function revealIn(box, chip) {
  if (!chip) return;
  const outer = box.getBoundingClientRect();
  const inner = chip.getBoundingClientRect();
  if (inner.bottom > outer.bottom) box.scrollTop += inner.bottom - outer.bottom + 4;
  else if (inner.top < outer.top) box.scrollTop -= outer.top - inner.top + 4;
}
function countAbove(box) {
  const top = box.getBoundingClientRect().top;
  let above = 0;
  for (const chip of box.children) {
    if (chip.getBoundingClientRect().bottom > top + 1) break;
    above += 1;
  }
  const strip = box.closest("#token-strip");
  if (strip.dataset.above === String(above)) return;
  strip.dataset.above = String(above);
  strip.style.setProperty("--tokens-above", String(above));
}
document.addEventListener("scroll", (event) => {
  if (event.target instanceof Element && event.target.matches("#token-strip .token-strip")) countAbove(event.target);
}, true);
function revealStep() {
  const box = document.querySelector("#token-strip .token-strip");
  if (!box) return;
  const shown = box.querySelectorAll(".tok.shown");
  const last = shown[shown.length - 1];
  revealIn(box, last && last.nextElementSibling && last.nextElementSibling.matches(".tok.next") ? last.nextElementSibling : last);
  if (shown.length) revealIn(box, last);
  countAbove(box);
}
whenReady(() => {
  const watchStrip = () => {
    const strip = document.getElementById("token-strip");
    if (!strip) return false;
    // Gradio patches the strip in place, over more than one batch of changes (a strip capped at
    // MAX_CHIPS changes its chips' text and class and adds none): every kind of change is watched, and
    // the step is revealed once the frame's changes are all in, not from a half-patched strip
    let pending = false;
    new MutationObserver((records) => {
      // the count of tokens above, set on the strip's own block, is no change of the strip's
      if (pending || records.every((record) => record.type === "attributes" && record.target === strip)) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; revealStep(); });
    }).observe(strip, { childList: true, subtree: true, attributes: true, characterData: true });
    return true;
  };
  if (watchStrip()) return;
  const watch = new MutationObserver(() => watchStrip() && watch.disconnect());
  watch.observe(document.body, { childList: true, subtree: true });
});

// Keyboard shortcuts (outside text fields): N next token, P prefill, R reset (asks first; R again
// confirms), 1-7 switch views (8 the experiment tab, 9 the lab), F the views full screen, S open or close the settings (the sidebar),
// L open or end the lesson; while it is open, the right and left arrows (and a presenter's clicker:
// PageDown, PageUp) turn its pages.
document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.isContentEditable)) return;
  const shown = (id) => document.getElementById(id)?.offsetParent != null;
  const lessonOpen = shown("lesson");
  const pages = { arrowright: "lesson-next", pagedown: "lesson-next", arrowleft: "lesson-prev", pageup: "lesson-prev" };
  const buttons = { n: "decode-btn", p: "prefill-btn", r: shown("reset-confirm") ? "reset-yes" : "reset-btn",
                    l: lessonOpen ? "lesson-close" : "lesson-btn", ...(lessonOpen ? pages : {}) };
  const key = event.key.toLowerCase();
  if (buttons[key]) {
    document.getElementById(buttons[key])?.click();
    event.preventDefault();
    return;
  }
  if (key === "f") {
    window.explorerFullscreen();
    event.preventDefault();
    return;
  }
  if (key === "s") {
    document.querySelector("#settings .toggle-button, .sidebar .toggle-button")?.click();
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
