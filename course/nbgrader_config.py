"""nbgrader configuration of the course: one assignment per chapter (``source/chNN/``, links to
the notebooks in ``../notebooks/``). Run stock nbgrader from this folder, on a copy of it that
nbgrader may write into (docs/teaching.md, "Grading with stock nbgrader"):

    nbgrader generate_assignment ch02        # release/ch02/: the student edition
    nbgrader autograde ch02 --create         # submitted/<student>/ch02/ -> autograded/
    nbgrader generate_feedback ch02
    nbgrader export

The scores nbgrader stores come from the student's own kernel, which the student's code can
change; the scores that count are the grader's (``python -m dflash_lite.course autograde``, or
``python -m dflash_lite.course.grader`` on an autograded notebook collected with ``course autograde``).
"""
c = get_config()  # noqa: F821  (nbgrader provides it)

c.CourseDirectory.course_id = "dflash-lite"
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_assignments = [{"name": f"ch{n:02d}"} for n in range(11)]
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.Execute.timeout = 600               # seconds per cell: the CPU chapters' longest cells
c.ExecutePreprocessor.kernel_name = "python3"

# Before the run, a collector cell goes in front of each test cell (after OverwriteCells has put
# the instructor's test cells back): the autograded notebooks then carry the answers' values, and
# `python -m dflash_lite.course.grader source/chNN/X.ipynb autograded/<student>/chNN/X.ipynb` scores them
# in a fresh process. dflash_lite must be importable (pip install -e .., or PYTHONPATH).
from nbgrader.preprocessors import (CheckCellMetadata, ClearOutput, DeduplicateIds,  # noqa: E402
                                    OverwriteCells, OverwriteKernelspec)

from dflash_lite.course.grader import InsertCollectors  # noqa: E402

c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells,
                                      InsertCollectors, CheckCellMetadata]
