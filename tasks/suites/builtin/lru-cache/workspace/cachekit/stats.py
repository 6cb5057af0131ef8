"""Hit and miss counters."""


class CacheStats:
    def __init__(self):
        self.hits = 0
        self.misses = 0

    @property
    def hit_rate(self):
        return self.hits / (self.hits + self.misses)
