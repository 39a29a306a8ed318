"""Request and token rate limits (RPM / TPM) with OpenAI's headers.

Token buckets that refill continuously on the simulation's clock: a limit of `600/min` holds 600
requests and refills 10 per second. A request takes one request and its estimated tokens (prompt
plus the completion cap) up front, as OpenAI counts. Answers carry `x-ratelimit-limit-*`,
`x-ratelimit-remaining-*` and `x-ratelimit-reset-*` (Go-style durations such as `1s`, `6m0s`);
a refusal is a 429 with `type` set to the limited dimension (`requests` or `tokens`), code
`rate_limit_exceeded`, and `retry-after` / `retry-after-ms`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..scenario.server import RateLimits
from ..scenario.units import Rate
from .openai.errors import ErrorAnswer, retry_headers


def go_duration(ns: int) -> str:
    """`1h30m0s`, `6m0s`, `1s`, `12ms`: the format OpenAI uses in reset headers."""
    if ns < 1_000_000_000:
        return f"{max(ns // 1_000_000, 1)}ms"
    seconds = ns / 1e9
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    if minutes or hours:
        text = f"{int(minutes)}m" + text
    if hours:
        text = f"{int(hours)}h" + text
    return text


@dataclass
class Bucket:
    """A token bucket on the virtual clock."""

    rate: Rate
    level: float
    updated: int = 0

    @property
    def capacity(self) -> int:
        return self.rate.count

    def refill(self, now: int) -> None:
        gained = (now - self.updated) * self.rate.count / self.rate.period_ns
        self.level = min(self.capacity, self.level + gained)
        self.updated = now

    def wait_for(self, amount: float) -> int:
        """Nanoseconds until `amount` is available."""
        missing = amount - self.level
        return 0 if missing <= 0 else int(missing * self.rate.period_ns / self.rate.count) + 1

    def reset_in(self) -> int:
        """Nanoseconds until the bucket is full again."""
        return self.wait_for(self.capacity)


class RateLimiter:
    """The server's RPM / TPM buckets, per API key or global."""

    def __init__(self, limits: RateLimits | None) -> None:
        self.limits = limits
        self._buckets: dict[tuple[str, str], Bucket] = {}

    def _bucket(self, dimension: str, owner: str, rate: Rate, now: int) -> Bucket:
        key = (dimension, owner)
        if key not in self._buckets:
            self._buckets[key] = Bucket(rate, float(rate.count), now)
        bucket = self._buckets[key]
        bucket.refill(now)
        return bucket

    def admit(self, key_name: str | None, tokens: int, model: str, now: int) -> dict[str, str]:
        """Take a request and its tokens; returns the headers to send, or raises the 429."""
        limits = self.limits
        if limits is None or (limits.requests is None and limits.tokens is None):
            return {}
        owner = (key_name or "anonymous") if limits.per == "key" else "global"
        wanted = {"requests": (limits.requests, 1), "tokens": (limits.tokens, tokens)}
        buckets = {dim: (self._bucket(dim, owner, rate, now), amount) for dim, (rate, amount) in wanted.items() if rate}
        for dimension, (bucket, amount) in buckets.items():
            wait = bucket.wait_for(amount)
            if wait:
                unit = "requests per min (RPM)" if dimension == "requests" else "tokens per min (TPM)"
                used = bucket.capacity - int(bucket.level)
                error = ErrorAnswer(
                    429,
                    f"Rate limit reached for {model} in organization org-aisim on {unit}: Limit {bucket.capacity}, "
                    f"Used {used}, Requested {amount}. Please try again in {go_duration(wait)}. Visit "
                    "https://platform.openai.com/account/rate-limits to learn more.",
                    dimension, None, "rate_limit_exceeded",
                )
                error.headers = {**self._headers(buckets), **retry_headers(wait)}
                raise error
        for bucket, amount in buckets.values():
            bucket.level -= amount
        return self._headers(buckets)

    @staticmethod
    def _headers(buckets: dict[str, tuple[Bucket, int]]) -> dict[str, str]:
        headers: dict[str, str] = {}
        for dimension, (bucket, _) in buckets.items():
            headers[f"x-ratelimit-limit-{dimension}"] = str(bucket.capacity)
            headers[f"x-ratelimit-remaining-{dimension}"] = str(max(0, int(bucket.level)))
            headers[f"x-ratelimit-reset-{dimension}"] = go_duration(bucket.reset_in())
        return headers
