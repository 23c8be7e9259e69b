/* Enter in a slider's number box applies the number, as leaving the box does: Dash's
   RangeSlider takes a typed number on blur alone (dcc's async-slider.js, the onBlur of its
   "dash-range-slider-input" boxes), and a reader who types 31 into "GPUs shown" and presses
   Enter expects the timeline to follow. The box loses focus, which applies it. */
document.addEventListener("keydown", function (event) {
    const box = event.target;
    if (event.key === "Enter" && box instanceof HTMLInputElement
            && box.classList.contains("dash-range-slider-input")) {
        box.blur();
    }
}, true);
