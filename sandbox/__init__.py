"""Hardened Docker sandboxes for agent episodes.

``base`` (the interface every backend implements); ``docker_backend`` (creates, takes over and
cleans up containers on one engine), ``docker_sandbox`` (one container: commands and files, one at a
time), ``hardening`` (what every container is made with), ``runner_protocol`` (the host's half of
the runner), ``inside`` (the runner inside each container) and ``attach`` (its channel),
``docker_exec`` (one ``docker exec`` per command, where the runner cannot serve), ``engine_health``
(is the engine still there?); ``pool`` (warm pool), ``ownership`` (labels and leak-free gc),
``seccomp``, ``paths``, ``image`` (the sandbox image and its two builders); for many engines
``engines``, ``factory``, ``endpoint`` and ``fleet``; ``showcase`` (the demo step), ``bench``.
Design notes and threat model: ``docs/sandbox.md``.
"""
