"""helpers: the course's importable package.

    from helpers import check
    check("sinusoidal_encoding", sinusoidal_encoding)   # a green or red panel

Modules, one concern each:
    checking   check(), CheckResult and the safety net around student code
    registry   the exercises (ids, points) and the diagnosis codes
    checks     each exercise's probes
    reference  the reference implementations
    mistakes   the catalogue of known-wrong code that names a mistake
    models     the real pretrained MiniLM, loaded offline
    plots      the figures; widgets  the sliders
    grade      `python -m helpers.grade`: grading a class
    release    `python -m helpers.release`: solutions -> student chapters
    bench      `python -m helpers.bench`: the budgets, measured

matplotlib, ipywidgets and transformers are imported inside the functions
that need them, so `import helpers` costs little beyond torch.
"""

from helpers.checking import CheckResult, check, check_device, solution_or_reference

__all__ = ["CheckResult", "check", "check_device", "solution_or_reference"]
