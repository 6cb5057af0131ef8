"""Head and tail of a command's output within a cap, however long the command writes.

Used by the runner inside the sandbox while it streams a command's output, and by the host on the
slow path (one ``docker exec`` per command, ``sandbox.docker_exec``), so both paths keep the same
bytes. Standard library only.
"""


class Capture:
    """Head and tail of a stream within ``cap`` bytes, however long the stream runs."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = b""
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail = (self.tail + data[-self.tail_cap :])[-self.tail_cap :]

    def text(self) -> tuple[str, bool]:
        kept = len(self.head) + len(self.tail)
        if self.total <= kept:
            return (bytes(self.head) + self.tail).decode("utf-8", "replace"), False
        marker = f"\n[... {self.total - kept} bytes truncated ...]\n"
        return self.head.decode("utf-8", "replace") + marker + self.tail.decode("utf-8", "replace"), True
