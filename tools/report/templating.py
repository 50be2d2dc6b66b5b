"""jinja2 rendering of the report tools' markdown (``templates/*.j2``, shipped as package data)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)


def render(name: str, **ctx: Any) -> str:
    """Render template ``name`` (a file in ``templates/``) with ``ctx``; runs of blank lines are
    folded to one and the text ends with one newline. Raises ``jinja2.TemplateNotFound`` /
    ``jinja2.UndefinedError`` for a missing template or a value it names that ``ctx`` lacks."""
    text = _env().get_template(name).render(**ctx)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"
