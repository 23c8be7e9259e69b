/* Every chart drawn at its box's width. A chart is drawn at the width of its box when its
   figure arrives; a figure that arrives while its part of the page is still hidden with
   `display: none` is drawn at Plotly's default of 700 px, and only a resize event the chart
   listens for draws it again (a part that holds a chart folds instead, keeping its width:
   dashboard/views/common.py FOLDED; a window's resize is another case).
   This looks at a chart after each drawing and whenever its box changes size, and redraws
   one whose drawn width is not its box's (one that fixes its own width excepted), asking
   once for each pair of widths. A box's width is the one its last resize event gave:
   reading it from the page would make the browser lay the page out after every drawing. */
(function () {
    "use strict";
    const watched = new WeakSet();
    const asked = new WeakMap();
    const box = new WeakMap();

    function fit(gd) {
        const full = gd._fullLayout;
        const width = box.get(gd);
        if (!window.Plotly || !full || (gd.layout && gd.layout.width) || !(width >= 1)) return;
        const wish = width + "/" + full.width;
        if (Math.abs(full.width - width) <= 1 || asked.get(gd) === wish) return;
        asked.set(gd, wish);
        window.Plotly.Plots.resize(gd).catch(function () {});
    }

    const observer = new ResizeObserver(function (entries) {
        entries.forEach(function (entry) {
            box.set(entry.target, Math.round(entry.contentRect.width));
            fit(entry.target);
        });
    });

    function watch() {
        // a chart is watched once Plotly has drawn it (its element then has `on`)
        document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
            if (watched.has(gd) || typeof gd.on !== "function") return;
            watched.add(gd);
            gd.on("plotly_afterplot", function () { fit(gd); });
            observer.observe(gd);        // its first event gives the box's width
        });
    }

    window.setInterval(watch, 500);
})();
