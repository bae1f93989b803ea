"""MkDocs hook: the site's home page is the repository's README.md and its Changelog page the CHANGELOG.md, their
links to ``docs/`` made relative to the docs folder, so each is written once."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FROM_ROOT = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}  # page: the file of the repository it shows


def on_page_markdown(markdown: str, page, config, files) -> str:
    source = FROM_ROOT.get(page.file.src_uri)
    if source is None:
        return markdown
    with open(os.path.join(ROOT, source), encoding="utf-8") as f:
        return re.sub(r"\]\(docs/", "](", f.read())
