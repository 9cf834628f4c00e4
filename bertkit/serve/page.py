"""GET /: one self-contained page (no external scripts or fonts) to try search and similarity."""

PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bertkit server</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
  h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
  input[type=text], textarea { width: 100%; box-sizing: border-box; padding: .4rem; font: inherit; }
  button { margin-top: .4rem; padding: .35rem .9rem; font: inherit; }
  ol { padding-left: 1.4rem; } li { margin: .35rem 0; }
  .score { font-variant-numeric: tabular-nums; color: #555; margin-right: .5rem; }
  .id { color: #777; font-size: .85em; margin-left: .4rem; }
  .error { color: #a00; } #model { color: #555; }
</style>
</head>
<body>
<h1>bertkit server</h1>
<p id="model">loading model information...</p>

<h2>Search</h2>
<form id="search-form">
  <input type="text" id="query" name="query" placeholder="type a query" autocomplete="off">
  <button type="submit" id="search-button">Search</button>
</form>
<p id="search-message"></p>
<ol id="results"></ol>

<h2>Similarity</h2>
<form id="similarity-form">
  <textarea id="text-a" rows="2" placeholder="first text"></textarea>
  <textarea id="text-b" rows="2" placeholder="second text"></textarea>
  <button type="submit" id="similarity-button">Compare</button>
</form>
<p id="similarity"></p>

<script>
"use strict";
async function call(path, body) {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const data = await response.json().catch(() => ({detail: response.statusText}));
  if (!response.ok) throw new Error(data.detail || ("HTTP " + response.status));
  return data;
}
function show(id, text, isError) {
  const node = document.getElementById(id);
  node.textContent = text;
  node.className = isError ? "error" : "";
}
call("/status").then(status => {
  const index = status.index ? status.index.documents + " documents indexed" : "no search index loaded";
  show("model", status.model.name + " \\u00b7 " + status.model.dimension + " dimensions \\u00b7 " + index);
}).catch(error => show("model", error.message, true));

document.getElementById("search-form").addEventListener("submit", async event => {
  event.preventDefault();
  const list = document.getElementById("results");
  list.replaceChildren();
  show("search-message", "searching...");
  try {
    const data = await call("/search", {query: document.getElementById("query").value, k: 10});
    for (const hit of data.results) {
      const item = document.createElement("li");
      item.className = "result";
      const score = document.createElement("span");
      score.className = "score";
      score.textContent = hit.score.toFixed(3);
      const id = document.createElement("span");
      id.className = "id";
      id.textContent = hit.id;
      item.append(score, document.createTextNode(hit.text), id);
      list.append(item);
    }
    show("search-message", data.results.length ? "" : "no results");
  } catch (error) { show("search-message", error.message, true); }
});

document.getElementById("similarity-form").addEventListener("submit", async event => {
  event.preventDefault();
  show("similarity", "comparing...");
  try {
    const texts = [document.getElementById("text-a").value, document.getElementById("text-b").value];
    const data = await call("/encode", {texts: texts, normalize: true});
    const [a, b] = data.results;
    const cosine = a.reduce((sum, value, i) => sum + value * b[i], 0);
    show("similarity", "cosine similarity: " + cosine.toFixed(4));
  } catch (error) { show("similarity", error.message, true); }
});
</script>
</body>
</html>
"""
