"""MkDocs hook: the site's home page is the repository's README.md, its links to ``docs/`` made relative to the
docs folder, so the README is written once."""

from __future__ import annotations

import os
import re

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != "index.md":
        return markdown
    with open(README, encoding="utf-8") as f:
        return re.sub(r"\]\(docs/", "](", f.read())
