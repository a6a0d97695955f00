"""The page of `nmt explain`: ONE self-contained HTML file from the dict of nmt/explain/command.py.

The renderer and its style sheet (nmt/explain/static/explain.js, explain.css: package data, shared with the page
of `nmt serve`, which serves them as static files) are inlined, and the data rides along as JSON in a
`<script type="application/json">` element. The page fetches nothing: no CDN, no font, no image; its
Content-Security-Policy allows no connection and only its own inline script and style (by their SHA-256), so a
page opened from disk stays on the reader's machine.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from pathlib import Path
from typing import Any

from nmt.io import atomic_write_text

STATIC = Path(__file__).resolve().parent / "static"
RENDERER = STATIC / "explain.js"  # NmtExplain.render(element, data)
STYLE = STATIC / "explain.css"

BOOT = """
NmtExplain.render(document.getElementById("explain"),
                  JSON.parse(document.getElementById("explain-data").textContent));
"""
PAGE_STYLE = "body { margin: 0 16px 40px; background: #fff; }\n"

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>nmt explain: {title}</title>
<style>{style}</style>
</head>
<body>
<main id="explain"><p>This page draws itself with JavaScript: please allow scripts for this file.</p></main>
<script type="application/json" id="explain-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""


def _sha256(text: str) -> str:
    """A CSP source naming exactly this inline text."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def data_json(data: dict[str, Any]) -> str:
    """The data as compact JSON that cannot end its <script> element early: '<' only occurs inside JSON strings,
    where \\u003c reads back as the same character."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def page_html(data: dict[str, Any]) -> str:
    """The whole page as text."""
    script = RENDERER.read_text(encoding="utf-8") + BOOT
    style = STYLE.read_text(encoding="utf-8") + PAGE_STYLE
    csp = (f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; img-src data:; "
           "connect-src 'none'; base-uri 'none'; form-action 'none'")
    return TEMPLATE.format(csp=csp, title=html.escape(data.get("sentence", "")[:80]), style=style,
                           data=data_json(data), script=script)


def write_page(data: dict[str, Any], path: Path) -> Path:
    """Write the page (atomically) and return its path."""
    if path.is_dir():
        path = path / "explain.html"
    atomic_write_text(path, page_html(data))
    return path
