/* django-celery-beat's periodic task page: the chosen crontab, in words, under its
 * field (the package's own inline script, as a file the admin's policy lets run). */
(function () {
  "use strict";
  var readable = JSON.parse(document.getElementById("readable-crontabs").textContent);
  var help = JSON.parse(document.getElementById("crontab-help").textContent);
  var translation = document.querySelector(".field-crontab_translation");
  if (translation) translation.style.display = "none";
  var field = document.querySelector(".field-crontab");
  var select = document.getElementById("id_crontab");
  if (!field || !select) return;
  field.addEventListener("change", function () {
    var shown = field.querySelector(".help");
    if (!shown) return;
    shown.textContent = help;
    shown.appendChild(document.createElement("br"));
    shown.appendChild(document.createTextNode("Translation: " + (readable[select.value] || "")));
  });
})();
