"""Text from a submission, made safe for where it is shown: a terminal, Markdown (which renders
HTML), CSV (which a spreadsheet may evaluate), a file name. Names and messages come from students
and their kernels: none of them may move a cursor, inject a table row or start a formula."""

from __future__ import annotations

import hashlib
import html
import os
import re
from pathlib import Path

# What no export shows: C0 and C1 control characters (terminal escapes), line and paragraph separators, every
# bidirectional control (Trojan Source's embeddings, overrides and isolates, and the marks LRM, RLM and ALM), and
# the invisible format characters (zero-width ones, word joiners, BOM, interlinear annotations, the tag characters
# that carry hidden text).
INVISIBLE = "\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f"
CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{INVISIBLE}]")
CONTROL_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{INVISIBLE}]")  # tabs and line breaks kept
SURROGATE = re.compile("[\ud800-\udfff]")
MAX_NAME = 200  # characters of a submission's name as shown


def _valid(text: object) -> str:
    """`text` as valid Unicode: a file name's undecodable bytes (os.fsdecode's surrogates) shown as \\xNN, any other
    lone surrogate (a kernel's JSON may carry one: "\\ud800") as U+FFFD, so that every export can encode it."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    return SURROGATE.sub(
        lambda m: f"\\x{ord(m[0]) - 0xDC00:02x}" if 0xDC80 <= ord(m[0]) <= 0xDCFF else "\ufffd",
        str("" if text is None else text),
    )


def plain(text: object, limit: int = 4000) -> str:
    """One line of printable text: control and invisible characters (C0, C1, bidirectional controls) become
    spaces, undecodable bytes of a file name show as \\xNN, and it is cut at `limit`."""
    text = " ".join(CONTROL.sub(" ", _valid(text)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clean(text: object) -> str:
    """A report's text as data (JSON): as `plain`, but its tabs and line breaks kept and its length its own."""
    return CONTROL_BUT_LINES.sub(" ", _valid(text))


def path_text(path: Path | str) -> str:
    return plain(os.fspath(path), MAX_NAME)


def markdown(text: object) -> str:
    """A Markdown table cell: one line, HTML escaped; pipes, backticks, brackets and a backslash before punctuation
    neutral (no `a\\|b` that ends the cell, no link or image a student wrote: `![x](https://...)` fetches a URL when
    shown; `caf\\xe9`, a file name's byte, stays as it is)."""
    escaped = re.sub(r"\\(?=[!-/:-@[-`{-~])", r"\\\\", html.escape(plain(text)))
    return escaped.replace("|", "\\|").replace("`", "&#96;").replace("[", "\\[").replace("]", "\\]")


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
