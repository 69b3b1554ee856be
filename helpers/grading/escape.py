"""Text from a submission, made safe for where it is shown: a terminal, Markdown (which renders
HTML), CSV (which a spreadsheet may evaluate), a file name. Names and messages come from students
and their kernels: none of them may move a cursor, inject a table row or start a formula."""

from __future__ import annotations

import hashlib
import html
import os
import re
from pathlib import Path

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MAX_NAME = 200  # characters of a submission's name as shown


def plain(text: object, limit: int = 4000) -> str:
    """One line of printable text: control characters (C0, C1, bidirectional overrides) become
    spaces, undecodable bytes of a file name show as \\xNN, and it is cut at `limit`."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    text = str("" if text is None else text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    text = " ".join(CONTROL.sub(" ", text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def path_text(path: Path | str) -> str:
    return plain(os.fspath(path), MAX_NAME)


def markdown(text: object) -> str:
    """A Markdown table cell: one line, HTML escaped, pipes and backticks neutral."""
    return html.escape(plain(text)).replace("|", "\\|").replace("`", "&#96;")


def csv_field(text: object) -> object:
    """A CSV cell a spreadsheet shows as text: a leading =, +, -, @ (a formula) gets a quote."""
    if isinstance(text, (int, float)):
        return text
    text = plain(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def file_stem(name: str, original: str) -> str:
    """A safe file name for a report: letters, digits, . _ - only, at most 80 characters, never a
    reserved name (summary*, results*); whenever it had to change, a short hash of the original
    keeps two students apart."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:80] or "submission"
    if safe != name or safe.lower().startswith(("summary", "results")):
        digest = hashlib.sha256(original.encode("utf-8", "surrogateescape")).hexdigest()[:8]
        safe = f"{safe[:70]}-{digest}"
    return safe
