// Render every LaTeX string given on stdin (a JSON list) with KaTeX; print a JSON list of
// errors (null where the string rendered). Used by tests/test_presentation.py.
const katex = require("katex");
let input = "";
process.stdin.on("data", (c) => (input += c));
process.stdin.on("end", () => {
  const out = JSON.parse(input).map((tex) => {
    try {
      katex.renderToString(tex, { throwOnError: true, displayMode: true, strict: "error", maxExpand: 1e6 });  // as the page
      return null;
    } catch (e) {
      return String(e.message || e);
    }
  });
  process.stdout.write(JSON.stringify(out));
});
