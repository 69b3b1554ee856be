"""A notebook cell's code as the grader's rules read it: comments and the text of strings dropped, in
time linear in the cell (a rule about code must not fire on a comment that names what it looks for, nor
cost a right notebook its marks on a large blank cell)."""

from __future__ import annotations

import re

# One alternation, each branch's repeated part matching one character in exactly one way: no backtracking.
_LITERAL = re.compile(
    r"""[rRbBuUfF]{0,2}(?:'''(?:[^'\\]|\\.|'(?!''))*'''|\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\""""
    r"""|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")|#[^\n]*""",
    re.DOTALL,
)


def code_only(source: str) -> str:
    """`source` with every comment removed and every string literal emptied (`""`); line breaks kept,
    so that a rule anchored at a line's start still finds it. A string left open runs to the end of its
    line (or, triple-quoted, is read as code: the rules err towards seeing code)."""
    return _LITERAL.sub(lambda m: "" if m.group().startswith("#") else '""' + "\n" * m.group().count("\n"), source)


# Cells that reach the grader's own machinery in the kernel (its function server, the protocol): a verdict that
# rests on what that machinery reports of the kernel (a module's Python attributes) is not counted there.
REACHES_GRADER = re.compile(
    r"\bhelpers\s*\.\s*grading\b|\bcourse_answer\b|\bfrom\s+helpers\s+import\s+[^\n]*\bgrading\b"
)
