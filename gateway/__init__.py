"""The gateway: the HTTP service every harness talks to.

It composes the layers below it (the guard, the sandbox engine, the store, the task catalog and
grading) behind the v1 API: ``core/`` holds what every request relies on, ``services/`` the logic,
``routers/`` the thin HTTP routes. Its command line and benchmark live at the top (``rlguard``).
"""
