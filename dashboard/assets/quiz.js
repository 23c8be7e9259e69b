/* Tooltip of the Questions view's bandwidth control: the slider moves in log10(GB/s). */
window.dccFunctions = window.dccFunctions || {};
window.dccFunctions.ringsimGbps = function (value) {
    return Number(Math.pow(10, value).toPrecision(3)) + " GB/s";
};
