"""The web page in a real headless browser: type a query, see ranked results; compare two texts.

Needs Node.js, the npm package playwright-core and a Chromium (Debian: apt-get install chromium;
npm install -g playwright-core). Skipped, with the reason, where any of them is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from servers import API_KEY, start

SCRIPT = Path(__file__).with_name("page_check.js")


def _browser_tools() -> tuple[str, str, str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    chromium = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no Chromium (apt-get install chromium, or set CHROMIUM_PATH)")
    roots = [os.environ.get("NODE_PATH", "")]
    npm = shutil.which("npm")
    if npm:
        roots.append(subprocess.run([npm, "root", "-g"], capture_output=True, text=True, timeout=30).stdout.strip())
    root = next((r for r in roots if r and (Path(r) / "playwright-core").is_dir()), None)
    if root is None:
        pytest.skip("the npm package playwright-core is not installed (npm install -g playwright-core)")
    return node, chromium, root


def test_page_search_and_similarity_in_chromium(tiny_model_dir, index_dir):
    node, chromium, node_path = _browser_tools()
    server = start(tiny_model_dir, index=str(index_dir), api_key=API_KEY)
    try:
        done = subprocess.run([node, str(SCRIPT), server.url + "/", API_KEY], capture_output=True, text=True,
                              timeout=90, env={**os.environ, "NODE_PATH": node_path, "CHROMIUM_PATH": chromium})
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert "4 documents indexed" in shown["model"]
    results = shown["results"]
    assert results[0]["id"] == "d1" and results[0]["text"] == "the cat sat on the mat"
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    assert shown["similarity"] == "cosine similarity: 1.0000"
