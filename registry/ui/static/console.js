// modelward console: the one script. Copy buttons copy the text of the element they name.
"use strict";
document.addEventListener("click", function (event) {
  var button = event.target.closest("button.copy");
  if (!button) { return; }
  var source = document.getElementById(button.dataset.copy);
  if (!source) { return; }
  var text = source.textContent;
  var done = function () { button.textContent = "Copied"; };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, function () { select(source); });
  } else {
    select(source);
    try { document.execCommand("copy"); done(); } catch (e) { /* selected: copy by hand */ }
  }
});
function select(node) {
  var range = document.createRange();
  range.selectNodeContents(node);
  var selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}
