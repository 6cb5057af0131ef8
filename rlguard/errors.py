"""Errors that the command line reports as one clear line instead of a traceback.

Each package has its own error base; the command line treats all of them alike.
"""

from gateway.errors import GatewayError
from guard.errors import GuardError
from rollout.errors import RolloutError
from sandbox.base import SandboxError
from store.errors import StoreError
from tasks.errors import TaskError
from trainer.errors import TrainerError


class RlguardError(Exception):
    """Base for the top layer's errors whose message alone tells the user what went wrong."""


USER_ERRORS: tuple[type[Exception], ...] = (
    RlguardError,
    GatewayError,
    SandboxError,
    GuardError,
    StoreError,
    TaskError,
    RolloutError,
    TrainerError,
)
