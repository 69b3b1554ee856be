"""Reports: one per submission (JSON, Markdown, Gradescope's results.json) and the class summary.
Every text that came from a submission or its kernel is escaped for where it goes (escape)."""

from __future__ import annotations

import collections
import csv
import io
import json
from typing import Any, cast

from helpers.grading.escape import clean, csv_field, markdown, plain
from helpers.grading.records import (
    CellError,
    ExerciseLine,
    GradescopeResults,
    GradescopeTest,
    Note,
    Report,
    Skipped,
    StudentLine,
    Summary,
    Verdict,
)
from helpers.grading.submission import diagnoses

# What students see of each failure: the diagnosis (and further findings) always; the hint
# from "hint" on; the fix only with "fix". The class summary never depends on it.
FEEDBACK = ("diagnosis", "hint", "fix")
FORMATS = ("json", "md", "gradescope")


# A report's size, bounded in the worker before it travels to the grader's process (which has no memory limit):
# each text from a submission or its kernel cut, each list of them too, so that a report is at most a few MB
# whatever the notebook (100,000 parameters named in one message would otherwise make it 150 MB).
MAX_MESSAGE = 4000  # characters of a message, a hint, a fix, a best-effort note
MAX_NOTES = 200  # errors, warnings, further findings of one exercise
TEXTS = ("message", "hint", "fix", "best_effort")  # a verdict's texts


def bounded(report: Report) -> Report:
    """`report` with every text and list of texts cut to the limits above (what a cut dropped is said), each text
    valid Unicode with no control or invisible character (`escape.clean`: a student's exception message or its
    class's name may carry terminal escapes, bidirectional overrides or a lone surrogate that no export could
    encode); each export escapes them further for where it shows them."""

    def text(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        # Cut first, then clean: `clean` never shortens a text, so nothing shown is lost, and its work is bounded
        # by what is kept (a reply's 20 MB message, repeated in 200 findings, took 23 s to clean whole).
        shown = clean(value[:MAX_MESSAGE])
        return shown[: MAX_MESSAGE - 1] + "…" if len(value) > MAX_MESSAGE or len(shown) > MAX_MESSAGE else shown

    def cut(entries: list[Any], what: Any) -> list[Any]:
        return entries if len(entries) <= MAX_NOTES else [*entries[:MAX_NOTES], what(len(entries) - MAX_NOTES)]

    def note(entry: Note | CellError) -> Note:
        return cast(Note, {k: text(v) for k, v in entry.items()})  # the message, and an error's type (a class's name)

    exercises = []
    for ex in report["exercises"]:
        ex = cast(Verdict, {k: text(v) if k in TEXTS else v for k, v in ex.items()})
        ex["also"] = [text(a) for a in cut(list(ex.get("also", [])), lambda n: f"... and {n} more")]
        exercises.append(ex)

    def more(kind: str) -> Any:
        return lambda n: Note(cell=None, type=kind, message=f"... and {n} more, not listed")

    return {
        **report,
        "submission": text(report["submission"]),
        "exercises": exercises,
        "errors": [cast(CellError, note(e)) for e in cut(report["errors"], more("TooManyErrors"))],
        "warnings": [note(w) for w in cut(report["warnings"], more("TooManyWarnings"))],
    }


def for_students(report: Report, feedback: str) -> Report:
    """The report with each exercise's help cut to the feedback level."""
    hidden = FEEDBACK[FEEDBACK.index(feedback) + 1 :]
    shown = [cast(Verdict, {k: v for k, v in ex.items() if k not in hidden}) for ex in report["exercises"]]
    return {**report, "exercises": shown}


def help_lines(ex: Verdict) -> list[str]:
    return [f"Also: {a}" for a in ex.get("also", [])] + [
        f"{label}: {text}" for label, text in (("Hint", ex.get("hint")), ("Fix", ex.get("fix"))) if text
    ]


def report_json(report: Report) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def report_markdown(report: Report) -> str:
    lines = [f"# {markdown(report['submission'])}", "", f"**Score: {report['score']:g} / {report['max_score']:g}**", ""]
    if report.get("flag"):
        lines += [f"**Not graded as anyone's work ({markdown(report['flag'])}): see the errors.**", ""]
    lines += ["| exercise | result | score | diagnosis | message |", "|---|---|---|---|---|"]
    for ex in report["exercises"]:
        result = "✔ passed" if ex["passed"] else "✘ failed"
        said = " ".join(
            [
                ex["message"],
                *([] if ex["passed"] else help_lines(ex)),
                *([f"(Best effort: {ex['best_effort']}.)"] if ex.get("best_effort") else []),
            ]
        )
        lines.append(
            f"| `{ex['id']}` | {result} | {ex['score']:g} / {ex['max_score']:g} | {markdown(ex['diagnosis'])} | {markdown(said)} |"
        )
    if report["errors"]:
        lines += [
            "",
            "## Errors while running the notebook",
            "",
            "Cells are numbered from 0, counting text cells.",
            "",
            "| cell | error | last line of the traceback |",
            "|---|---|---|",
        ]
        lines += [
            f"| {markdown(e['cell'])} | {markdown(e['type'])} | {markdown(e['message'])} |" for e in report["errors"]
        ]
    if report.get("warnings"):
        lines += ["", "## For a person to look at", ""]
        lines += [
            f"- cell {w['cell']}: {markdown(w['message'])}" if w["cell"] is not None else f"- {markdown(w['message'])}"
            for w in report["warnings"]
        ]
    return "\n".join(lines) + "\n"


def report_gradescope(report: Report) -> str:
    """Gradescope's autograder results.json: shown as plain text (`output_format`), each line of it escaped
    (no control character, terminal escape or bidirectional override reaches the page), best effort said."""
    tests: list[GradescopeTest] = []
    for ex in report["exercises"]:
        lines = [ex["message"]] if ex["passed"] else [f"{ex['diagnosis']}: {ex['message']}", *help_lines(ex)]
        lines += [f"(Best effort: {ex['best_effort']}.)"] if ex.get("best_effort") else []
        tests.append(
            {
                "name": plain(ex["id"]),
                "score": ex["score"],
                "max_score": ex["max_score"],
                "status": "passed" if ex["passed"] else "failed",
                "output": "\n".join(plain(line) for line in lines),
                "output_format": "text",
            }
        )
    errors = "\n".join(
        plain(f"cell {e['cell']}: {e['message']}" if e["cell"] is not None else e["message"]) for e in report["errors"]
    )
    results: GradescopeResults = {
        "score": report["score"],
        "execution_time": report.get("seconds", 0),
        "output": f"Errors while running your notebook:\n{errors}" if errors else "Your notebook ran without errors.",
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    return json.dumps(results, indent=2, ensure_ascii=False) + "\n"


RENDER = {
    "json": (".json", report_json),
    "md": (".md", report_markdown),
    "gradescope": (".results.json", report_gradescope),
}


def summarize(reports: list[Report], skipped: list[Skipped] | None = None) -> Summary:
    """Each student's score; each exercise's pass rate and the class's most common mistake."""
    codes = diagnoses()
    counts: dict[str, tuple[Verdict, list[bool], collections.Counter[str | None]]] = {}
    for report in reports:
        for ex in report["exercises"]:
            first, passed, mistakes = counts.setdefault(ex["id"], (ex, [], collections.Counter()))
            passed.append(bool(ex["passed"]))
            if not ex["passed"]:
                mistakes[ex["diagnosis"]] += 1
    exercises: list[ExerciseLine] = []
    for first, passed, mistakes in counts.values():
        common = mistakes.most_common(1)
        exercises.append(
            {
                "id": first["id"],
                "max_score": first["max_score"],
                "submissions": len(passed),
                "passed": sum(passed),
                "diagnoses": dict(mistakes.most_common()),
                "pass_rate": round(sum(passed) / len(passed), 3),
                "most_common_diagnosis": common[0][0] if common else None,
                "most_common_count": common[0][1] if common else 0,
                "meaning": codes.get(common[0][0] or "", "") if common else "",
            }
        )
    students: list[StudentLine] = [
        {
            "submission": r["submission"],
            "score": r["score"],
            "max_score": r["max_score"],
            "errors": len(r["errors"]),
            "graded": r["graded"],
            "flag": r.get("flag"),
            "exercises": {e["id"]: e["score"] for e in r["exercises"]},
            "best_effort": [e["id"] for e in r["exercises"] if e.get("best_effort")],
        }
        for r in reports
    ]
    return {"submissions": len(reports), "students": students, "exercises": exercises, "skipped": list(skipped or [])}


def status(student: StudentLine) -> str:
    if not student["graded"]:
        return "NOT GRADED (grader error)"
    return f"FLAGGED, not graded as anyone's work: {student['flag']}" if student.get("flag") else ""


def summary_markdown(summary: Summary) -> str:
    lines = [
        f"# Class summary: {summary['submissions']} submissions",
        "",
        "| submission | score | errors |",
        "|---|---|---|",
    ]
    for s in summary["students"]:
        note = f" ({status(s)})" if status(s) else ""
        lines.append(f"| {markdown(s['submission'])} | {s['score']:g} / {s['max_score']:g}{note} | {s['errors']} |")
    lines += ["", "| exercise | passed | most common mistake |", "|---|---|---|"]
    for e in summary["exercises"]:
        mistake = (
            f"`{e['most_common_diagnosis']}` ×{e['most_common_count']}: {e['meaning']}"
            if e["most_common_diagnosis"]
            else "none"
        )
        lines.append(f"| `{e['id']}` | {e['passed']}/{e['submissions']} ({e['pass_rate']:.0%}) | {markdown(mistake)} |")
    if summary.get("skipped"):
        lines += ["", "Skipped:", ""] + [
            f"- {markdown(s['path'])}: {markdown(s['reason'])}" for s in summary["skipped"]
        ]
    return "\n".join(lines) + "\n"


def summary_csv(summary: Summary) -> str:
    ids = [e["id"] for e in summary["exercises"]]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    # best_effort, last: the exercises whose verdict rests on the kernel's word (see each report)
    writer.writerow(["submission", "score", "max_score", "errors", *ids, "best_effort"])
    for s in summary["students"]:
        writer.writerow(
            [
                csv_field(v)
                for v in (
                    s["submission"],
                    s["score"],
                    s["max_score"],
                    s["errors"],
                    *(s["exercises"].get(i, "") for i in ids),
                    " ".join(s.get("best_effort", [])),
                )
            ]
        )
    return buffer.getvalue()


def summary_text(summary: Summary) -> str:
    """The table printed at the end of a batch."""
    width = min(
        60,
        max(
            [len(plain(s["submission"])) for s in summary["students"]]
            + [len(e["id"]) for e in summary["exercises"]]
            + [10]
        ),
    )
    lines = ["", f"{'submission':<{width}}  score"]
    for s in summary["students"]:
        lines.append(
            f"{plain(s['submission'], 200):<{width}}  {s['score']:g}/{s['max_score']:g}"
            + (f"  {status(s)}" if status(s) else "")
        )
    lines += ["", f"{'exercise':<{width}}  passed        most common mistake"]
    for e in summary["exercises"]:
        rate = f"{e['passed']}/{e['submissions']} ({e['pass_rate']:.0%})"
        mistake = (
            f"{e['most_common_diagnosis']} x{e['most_common_count']}: {e['meaning']}"
            if e["most_common_diagnosis"]
            else "-"
        )
        lines.append(f"{e['id']:<{width}}  {rate:<12}  {mistake}")
    lines += [f"skipped: {plain(s['path'])} ({plain(s['reason'])})" for s in summary.get("skipped", [])]
    return "\n".join(lines) + "\n"
