// MathJax for the equations (pymdownx.arithmatex, generic mode), as Material for MkDocs documents.
// MathJax itself is served from the site (assets/mathjax/, scripts/mkdocs_mathjax.py), and so is
// textmacros, which typesets \_ and other macros inside \text{} (e.g. \text{per\_query}).
window.MathJax = {
  loader: { load: ["[tex]/textmacros"] },
  tex: {
    packages: { "[+]": ["textmacros"] },
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
};
document$.subscribe(() => {
  MathJax.typesetPromise();
});
