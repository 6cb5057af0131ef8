"""Code that runs inside the grading container, shipped there as text.

The files import each other by the module names they get in the container (``grading_wire``,
``grading_remote``, ``grading_proxies``, ``grading_import_hook``, ``grading_worker``,
``rlguard_checks``: ``tasks.collect.INSIDE_FILES``, shipped by
``tasks.grading.isolated.grader_bundle``; the pytest mode's files: ``tasks.grading.pytest_mode``),
not by their package names here.
"""
