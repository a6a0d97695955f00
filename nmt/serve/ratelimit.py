"""Rate limits per client address: translation requests and characters per minute (LibreTranslate's --req-limit /
--char-limit idea), 429 past either. Counted by the `limits` library (sliding-window counters in memory, cost
per hit); slowapi, built on it, only counts requests per route with a decorator, and characters need the body.
Counters live in this process: with several worker processes each counts its own share."""

from __future__ import annotations

import time

from nmt.config.serve import ServeConfig
from nmt.serve.http_errors import ApiError


class RateLimits:
    def __init__(self, limits: ServeConfig):
        self.rules = [(key, per_minute) for key, per_minute in (("requests_per_minute", limits.requests_per_minute),
                                                               ("chars_per_minute", limits.chars_per_minute))
                      if per_minute > 0]
        if not self.rules:
            return
        from limits import RateLimitItemPerMinute
        from limits.storage import MemoryStorage
        from limits.strategies import SlidingWindowCounterRateLimiter

        self.limiter = SlidingWindowCounterRateLimiter(MemoryStorage())
        self.items = {key: RateLimitItemPerMinute(per_minute) for key, per_minute in self.rules}

    def check(self, client: str, chars: int) -> None:
        """Count one request of `chars` characters from `client`, or raise the 429 saying which limit and when
        to retry (a refused request counts nothing)."""
        costs = {"requests_per_minute": 1, "chars_per_minute": chars}
        for key, per_minute in self.rules:
            if costs[key] > per_minute:
                raise ApiError(429, f"Slowdown: {costs[key]} characters in one request, over the limit serve.{key}="
                                    f"{per_minute}", f"serve.{key}")
            if not self.limiter.test(self.items[key], client, cost=costs[key]):
                reset = self.limiter.get_window_stats(self.items[key], client).reset_time
                raise ApiError(429, f"Slowdown: too many requests from {client}: over the limit serve.{key}="
                                    f"{per_minute} ({per_minute} per 1 minute)",
                               f"serve.{key}", retry_after=max(1.0, reset - time.time()))
        for key, _ in self.rules:
            self.limiter.hit(self.items[key], client, cost=costs[key])
