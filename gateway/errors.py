"""The gateway's errors: each maps to one HTTP status in the routers, and to one line on the
command line (``GatewayError`` is among the errors the CLI prints without a traceback)."""


class GatewayError(Exception):
    """Base of the gateway's errors."""


class UnknownTaskError(GatewayError, KeyError):
    """No task has this reference (404)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return f"no task {self.args[0]!r}" if self.args else "no such task"


class EpisodeNotFound(GatewayError):
    """No episode has this id (404)."""


class EpisodeNotRunning(GatewayError):
    """The episode has ended or is ending: it takes no more calls (409)."""

    def __init__(self, episode_id: str, status: str, reason: str | None = None) -> None:
        because = f" ({reason})" if reason else ""
        super().__init__(f"episode {episode_id} is {status}{because}; it takes no more calls")
        self.status = status


class EpisodeElsewhere(GatewayError):
    """The episode runs, but on another gateway (421 Misdirected Request, naming that gateway).

    Gateways share one database and each episode is owned by the one that created it (its lease);
    only the owner holds the sandbox and the episode's memory, so a call or a finish sent elsewhere
    is refused, never answered from here."""

    def __init__(self, episode_id: str, owner: str | None, owner_url: str | None) -> None:
        where = f" at {owner_url}" if owner_url else " (its URL is unknown)"
        super().__init__(f"episode {episode_id} runs on gateway {owner or '?'}{where}; send it there")
        self.owner = owner
        self.owner_url = owner_url


class CapacityError(GatewayError):
    """No sandbox could be started: the engine is down or out of resources (503)."""
