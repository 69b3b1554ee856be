"""helpers: the course's importable package.

    from helpers import check
    check("sinusoidal_encoding", sinusoidal_encoding)   # a green or red panel

Modules, one concern each:
    checking   check(), CheckResult and the safety net around student code
    tracking   progress() and hint(): where a student stands, remembered across restarts
    registry   the public contract: the diagnosis codes, and what an Exercise declares
    exercises  the catalogue, one module per chapter: known mistakes, probes, declarations
    reference  the reference implementations
    models     the real pretrained MiniLM, loaded offline
    plots      the figures; widgets  the sliders
    grade      `python -m helpers.grade`: grading a class
    release    `python -m helpers.release`: solutions -> student chapters
    bench      `python -m helpers.bench`: the budgets, measured

matplotlib, ipywidgets and transformers are imported inside the functions
that need them, so `import helpers` costs little beyond torch.
"""

from helpers.checking import CheckResult, check, check_device, solution_or_reference
from helpers.tracking import hint, progress

__all__ = ["CheckResult", "check", "check_device", "hint", "progress", "solution_or_reference"]
