"""The two-stage guard: every tool call is read as it would run and judged before it runs.

``pipeline`` (``Guard.check``: the decision table) runs stage 1, ``normalize`` (the call as it
would run: shell parsed, wrappers and encodings unwrapped, code read) and ``rules`` (YAML rule packs
in ``rulepacks/``) with the episode's ``memory`` and the repository's context (``repo``); an
``escalate`` match goes to stage 2, the LLM ``judge``; an intercepted call is answered by ``decoys``.
``review`` reads the final patch of a graded episode, ``review_policy`` says what a finding does to
the reward. Nothing here knows HTTP, Docker or a database.
"""
