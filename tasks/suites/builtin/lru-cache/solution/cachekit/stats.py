"""Hit and miss counters."""


class CacheStats:
    def __init__(self):
        self.hits = 0
        self.misses = 0

    @property
    def hit_rate(self):
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0
