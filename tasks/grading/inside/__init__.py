"""Code that runs inside the grading container, shipped there as text.

The files import each other by the module names they get in the container (``grading_wire``,
``grading_remote``, ``grading_worker``, ``rlguard_checks``; see ``tasks.grading.grade.grader_bundle``),
not by their package names here.
"""
