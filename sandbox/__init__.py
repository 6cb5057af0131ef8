"""Hardened Docker sandboxes for agent episodes.

``base`` (the interface every backend implements), ``docker_backend`` (containers and their
hardening), ``inside.executor`` (the runner inside each container) and ``attach`` (its channel), ``pool``
(warm pool), ``ownership`` (labels and leak-free gc), ``seccomp``, ``paths``, ``image`` (the
sandbox image and its two builders), ``showcase`` (the demo step), ``bench``, ``cli``.
Design notes and threat model: ``docs/sandbox.md``.
"""
