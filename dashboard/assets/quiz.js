/* Tooltip of the Questions view's bandwidth control: the slider moves in log10(GB/s); the
   number is written in the page's language (the document's lang, which the language switch sets). */
window.dccFunctions = window.dccFunctions || {};
window.dccFunctions.ringsimGbps = function (value) {
    const locale = document.documentElement.lang === "id" ? "id-ID" : "en-US";
    return Math.pow(10, value).toLocaleString(locale, {maximumSignificantDigits: 3}) + " GB/s";
};
