"""Whole groups for group baselines (GRPO, RLOO) in an asynchronous loop: schedule, collect, release.

Why: a group baseline compares several episodes of the *same task*. An asynchronous loop that draws
one episode per task and trains whatever has landed forms groups of one (100% with the defaults:
nothing to compare with, and with 0/1 rewards no advantage is ever negative). slime and AReaL
schedule a prompt's whole group together; so does this module, as two small pure classes the loop
drives (no I/O, no clock, no threads: the loop owns those):

* :class:`GroupScheduler` hands out episodes group by group: all ``group_size`` members of a task's
  group are issued before the next group's first, and a new group starts only while the staleness
  gate allows it: fewer than ``(max_staleness + 1 + steps) x groups_per_step`` groups started
  (AReaL's rule, counted in groups), so the rollout runs at most ``max_staleness`` steps ahead of
  the trainer. Tasks are taken round-robin.
* :class:`GroupBuffer` collects finished episodes by group and releases a group only when every
  member has finished (first complete, first released). A member that ended unusable (an
  infrastructure error) leaves its group smaller; a group left with fewer than ``min_size`` usable
  members is *discarded* (the loop marks its episodes unusable) instead of trained as a group of one.

The trainer then takes ``groups_per_step`` released groups per step, so every trained group has its
full size; tokens that became older than ``max_staleness`` while a long member ran are masked from
the loss by the trainer (``stale_mode="mask"``), not dropped with their episode.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GroupMember:
    """One episode to play: member ``member`` of group ``group`` (of ``size``) on ``task``."""

    group: int
    task: str
    member: int
    size: int
    started_at_step: int


@dataclass(frozen=True)
class ReadyGroup:
    """A group whose members have all finished: the usable members' episode ids, in member order."""

    group: int
    task: str
    episode_ids: tuple[str, ...]
    size: int  # members scheduled
    started_at_step: int

    @property
    def full(self) -> bool:
        return len(self.episode_ids) == self.size


class GroupScheduler:
    """Episodes to start, a whole group at a time, within the staleness gate (module docstring)."""

    def __init__(
        self,
        tasks: Sequence[str],
        group_size: int,
        groups_per_step: int,
        max_staleness: int,
        total_groups: int | None = None,
    ) -> None:
        if not tasks:
            raise ValueError("a group scheduler needs at least one task")
        if group_size < 1 or groups_per_step < 1:
            raise ValueError("group_size and groups_per_step must be at least 1")
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        if total_groups is not None and total_groups < 0:
            raise ValueError("total_groups must be >= 0")
        self.tasks = list(tasks)
        self.group_size = group_size
        self.groups_per_step = groups_per_step
        self.max_staleness = max_staleness
        self.total_groups = total_groups
        self.groups_started = 0
        self._pending: deque[GroupMember] = deque()
        self.gate_waits = 0

    def allowed_groups(self, steps_done: int) -> int:
        """How many groups may have started once the trainer has taken ``steps_done`` steps."""
        return (self.max_staleness + 1 + steps_done) * self.groups_per_step

    @property
    def exhausted(self) -> bool:
        """Every group of the budget has been handed out in full."""
        return (
            self.total_groups is not None and self.groups_started >= self.total_groups and not self._pending
        )

    def next_episode(self, steps_done: int) -> GroupMember | None:
        """The next episode to start: the current group's next member, else the first member of a new
        group if the gate and the budget allow; None when the caller must wait (or all is handed out)."""
        if self._pending:
            return self._pending.popleft()
        if self.total_groups is not None and self.groups_started >= self.total_groups:
            return None
        if self.groups_started >= self.allowed_groups(steps_done):
            self.gate_waits += 1
            return None
        group = self.groups_started
        task = self.tasks[group % len(self.tasks)]
        self.groups_started += 1
        members = [GroupMember(group, task, m, self.group_size, steps_done) for m in range(self.group_size)]
        self._pending.extend(members[1:])
        return members[0]


@dataclass
class _Collecting:
    member: GroupMember
    finished: dict[int, str | None] = field(default_factory=dict)  # member -> episode id (None: unusable)


class GroupBuffer:
    """Finished episodes by group; complete groups released first-complete, first-out."""

    def __init__(self, min_size: int = 2) -> None:
        if min_size < 1:
            raise ValueError("min_size must be at least 1")
        self.min_size = min_size
        self._collecting: dict[int, _Collecting] = {}
        self._ready: deque[ReadyGroup] = deque()
        self._closed: set[int] = set()
        self.discarded: list[ReadyGroup] = []

    def add(self, member: GroupMember, episode_id: str | None, usable: bool = True) -> ReadyGroup | None:
        """Record that ``member`` finished (``usable`` False: it cannot be trained on); returns its
        group when this completed it and it was released (None otherwise)."""
        if member.group in self._closed:
            raise ValueError(f"group {member.group} is complete: member {member.member} finished twice")
        entry = self._collecting.setdefault(member.group, _Collecting(member))
        if member.member in entry.finished:
            raise ValueError(f"member {member.member} of group {member.group} finished twice")
        entry.finished[member.member] = episode_id if usable and episode_id else None
        if len(entry.finished) < member.size:
            return None
        del self._collecting[member.group]
        self._closed.add(member.group)
        ids = tuple(entry.finished[m] for m in sorted(entry.finished) if entry.finished[m] is not None)
        group = ReadyGroup(member.group, member.task, ids, member.size, entry.member.started_at_step)  # type: ignore[arg-type]
        if len(ids) < self.min_size:
            self.discarded.append(group)
            return None
        self._ready.append(group)
        return group

    def ready(self) -> int:
        """Complete groups waiting for the trainer."""
        return len(self._ready)

    def in_flight(self) -> int:
        """Groups with members still running."""
        return len(self._collecting)

    def take(self, count: int) -> list[ReadyGroup]:
        """Up to ``count`` complete groups, oldest-complete first."""
        taken = []
        while self._ready and len(taken) < count:
            taken.append(self._ready.popleft())
        return taken
