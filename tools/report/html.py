"""``report.html``: the same report as ``report.md`` in one self-contained file to share (issue 27
point 4). The markdown ``report.md.j2`` rendered is turned into HTML by markdown-it-py (CommonMark
with tables; raw HTML in the text is escaped, so a user's string cannot inject markup) and wrapped
in ``templates/report.html.j2``; every picture is embedded as a ``data:`` URI and the page's
Content-Security-Policy allows nothing else to load, so opening it fetches nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import PurePath

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

from .templating import render

_MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def _md() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    default = md.renderer.rules.get("image")

    def image(tokens, idx, options, env):  # type: ignore[no-untyped-def]
        tok = tokens[idx]
        name = PurePath(tok.attrGet("src") or "").name
        data = env["images"].get(name)
        if data is None:  # never a link to fetch: the alt text stands in
            return f"<em>[picture {escapeHtml(name)} not embedded]</em>"
        mime = _MIME.get(PurePath(name).suffix.lower(), "application/octet-stream")
        tok.attrSet("src", f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}")
        return default(tokens, idx, options, env) if default else md.renderer.renderToken(tokens, idx, options, env)

    md.renderer.rules["image"] = image
    return md


def report_html(markdown_text: str, images: Mapping[str, bytes], title: str) -> str:
    """The HTML page of ``markdown_text`` (report.md's text); ``images``: picture file name ->
    its bytes (``gpu_time_breakdown.png`` ...), each ``![...](name)`` embedded as a data URI (a
    picture not given is named in the text, never linked). Returns the page."""
    body = _md().render(markdown_text, {"images": dict(images)})
    return render("report.html.j2", title=title, body=body)


__all__ = ["report_html"]
