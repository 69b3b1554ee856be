"""Grading a class: run each submitted notebook in a sandbox, then check every exercise outside it.

    python -m helpers.grade SUBMISSION.ipynb [MORE.ipynb | DIR ...] --out DIR
                            [--format json|md|gradescope] [--timeout SECONDS_PER_CELL]
                            [--notebook-timeout SECONDS] [--jobs N] [--chapter NN]
                            [--memory-mb MB] [--no-sandbox] [--quiet]
                            [--feedback diagnosis|hint|fix]

0. Collect (collect). Every submission is read once, before any notebook runs, size-capped.
   A symbolic link, a file that is not a regular file, or one file submitted under two paths
   is reported and not graded as anyone's work.
1. Sandbox (sandbox). Each kernel runs under bubblewrap: the system and the course's Python
   read-only, without the course's reference and exercise catalogue (stand-ins take their
   place), a private size-capped scratch folder and /tmp, its own PID namespace, no network,
   hard limits on processes, open files, file size and memory, only named environment
   variables, and cores of its own (on a machine with 2 or more cores, at any --jobs).
2. Execute (submission, kernel). Cells run one by one, errors allowed; a cell past its time
   limit is interrupted, then killed; a cell that kills the kernel is skipped and the cells
   before it are re-run in a new kernel. --notebook-timeout bounds it all.
3. Check (submission, remote, serve, wire). The kernel becomes a function server: the
   grader asks it to call the notebook's objects on inputs drawn from a secret per-submission
   seed and gets back plain data (tensors in safetensors, numbers, names), size- and
   time-capped. The checks, the mistake catalogue, the diagnosis and the score are computed in
   the grader's own process, by the same code as `check()` in a notebook.
4. Report (reports, batch). Once the sandbox is gone, one report per submission under --out
   and a class summary; every text from a submission escaped for where it is shown.

The exit code says whether grading ran (0), failed for a reason that is not the students' (1),
or could not start (2: a wrong command line, no sandbox).
"""
