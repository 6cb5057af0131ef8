"""Code that runs inside sandbox containers, not on the host: the command runner.

Standard library only. Its modules go to the container as one program (``sandbox.runner_protocol``)
and import each other by their names here; ``capture`` is also used by the host's slow path.
"""
