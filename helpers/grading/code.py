"""A notebook cell's code as the grader's rules read it: comments and the text of strings dropped, in
time linear in the cell (a rule about code must not fire on a comment that names what it looks for, nor
cost a right notebook its marks on a large blank cell), and read as Python reads it: identifiers
NFKC-normalised (`ｈｅｌｐｅｒｓ` is `helpers` to Python), an f-string's replacement fields kept (they are
code), a backslash's line continuation joined."""

from __future__ import annotations

import re
import unicodedata

# One alternation, each branch's repeated part matching one character in exactly one way: no backtracking.
_LITERAL = re.compile(
    r"""[rRbBuUfF]{0,2}(?:'''(?:[^'\\]|\\.|'(?!''))*'''|\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\""""
    r"""|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")|#[^\n]*""",
    re.DOTALL,
)
_FIELD = re.compile(r"\{([^{}]*)")  # an f-string's replacement field (and each part of a nested format spec)


def _literal(match: re.Match[str]) -> str:
    """A comment: nothing. A string: `""`, its line breaks kept, and, for an f-string, the code of its fields."""
    found = match.group()
    if found.startswith("#"):
        return ""
    prefix = found[: len(found) - len(found.lstrip("rRbBuUfF"))]
    fields = ""
    if "f" in prefix.lower():
        body = found[len(prefix) :].replace("{{", "").replace("}}", "")
        fields = " ".join(f"({code_only(field)})" for field in _FIELD.findall(body))
    return '""' + fields + "\n" * found.count("\n")


def code_only(source: str) -> str:
    """`source` with every comment removed and every string literal emptied (`""`, an f-string's fields
    kept as code); line breaks kept, so that a rule anchored at a line's start still finds it, but those of
    a backslash continuation; identifiers as Python reads them (NFKC). A string left open runs to the end of
    its line (or, triple-quoted, is read as code: the rules err towards seeing code)."""
    code = unicodedata.normalize("NFKC", _LITERAL.sub(_literal, source))
    return re.sub(r"\\[ \t]*\r?\n", " ", code)


_IMPORTED = re.compile(r"\bimport\s*(\([^)]*|[^\n;]*)")  # what an import statement names, brackets included
_GRADING = re.compile(r"\bgrading\b")
_GRADER_NAMES = re.compile(r"\.\s*grading\b|\bcourse_answer\b")


def reaches_grader(code: str) -> bool:
    """Code (code_only's) that reaches the grader's own machinery in the kernel (its function server, the
    protocol): an import that names `grading` (`from helpers import (grading,)`, `import helpers.grading`),
    an attribute `.grading` (`h.grading`, whatever `h` is called), or the server's hook, `course_answer`.
    A verdict that rests on what that machinery reports of the kernel (a module's parameters and Python
    attributes) is not counted there. Reached through built strings (getattr, importlib, sys.modules), it
    is not seen: that reach is obfuscated, and the verdict says it is best effort. Linear in the code, and
    a substring search where neither name appears (a large blank cell)."""
    if "grading" not in code and "course_answer" not in code:
        return False
    if _GRADER_NAMES.search(code):
        return True
    return any(_GRADING.search(imported[1]) for imported in _IMPORTED.finditer(code))
