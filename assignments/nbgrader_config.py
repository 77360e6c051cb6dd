"""nbgrader configuration of the specbook course (instructor side).

The course directory is this folder: source/ holds the instructor notebooks (built from
src/ by ``python course.py build``), release/ the student versions, submitted/ the
collected work, autograded/ and feedback/ the results, gradebook.db the scores.
"""
c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = "specbook"
c.CourseDirectory.assignment_id = ""
# The statistical checker makes thousands of calls to the student's function; give a cell
# minutes, not nbgrader's default 30 s, so a slow laptop or a busy grading server does not
# turn a correct answer into a timeout.
c.Execute.timeout = 600
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
# Feedback shows each test cell's output (for the statistical tests: the checker's full report,
# with what went wrong and a hint) but not the source of the hidden tests.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
