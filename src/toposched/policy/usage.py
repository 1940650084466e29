"""GPU-seconds allocated per account over a sliding window, optionally decayed, kept live."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from toposched.cluster.errors import InputError
from toposched.cluster.units import HOUR, WEEK
from toposched.policy.budget import ROOT, account_ancestors

__all__ = ["DEFAULT_BUCKET", "DEFAULT_WINDOW", "UsageTracker"]

DEFAULT_WINDOW = WEEK
"""Seconds of history that count towards fair share: one week, as in Ai2's deployment."""
DEFAULT_BUCKET = HOUR
"""Seconds per bucket: usage leaves the window one hour at a time."""

# With decay, deposits are stored scaled up by 2**((t - reference) / half_life) so that decaying
# costs nothing until read; the reference moves forward before the scale factor can overflow.
_REBASE_AFTER_HALF_LIVES = 64.0
# Running GPU counts are sums and differences of floats (fractional GPUs); below this they are 0.
_GPU_EPSILON = 1e-9


class _Meter:
    """One account's running rate and its per-bucket GPU-seconds still inside the window."""

    __slots__ = ("rate", "accrued_until", "indices", "values", "total", "reference")

    def __init__(self, now: float) -> None:
        self.rate = 0.0
        self.accrued_until = now
        self.indices: deque[int] = deque()
        self.values: deque[float] = deque()
        self.total = 0.0
        self.reference = now


class UsageTracker:
    """GPU-seconds allocated to each account (and each account's subtree) over a sliding window.

    `start` and `stop` change how many GPUs an account holds; held GPUs accrue continuously.
    Every account path keeps its own meter, and a change to a leaf updates only the meters on its
    path (the leaf, its ancestors and the cluster total), so one job finishing costs O(depth),
    whatever else is pending or running. Usage of an inner account is the sum over its subtree.

    The window is kept in buckets of `bucket` seconds: bucket k holds the GPU-seconds of
    [k * bucket, (k + 1) * bucket) and counts while any part of it lies within the last `window`
    seconds, so usage looks back between `window` and `window + bucket` seconds and expiry drops
    whole buckets. With `half_life`, each GPU-second also weighs 2 ** -(age / half_life).

    The tracker has no clock: every call passes `now` in seconds, and `now` must not go backwards.
    """

    def __init__(
        self,
        window: float = DEFAULT_WINDOW,
        bucket: float = DEFAULT_BUCKET,
        half_life: float | None = None,
    ) -> None:
        self.window = _positive_seconds("window", window)
        self.bucket = _positive_seconds("bucket", bucket)
        if self.bucket > self.window:
            raise InputError("bucket", bucket, f"must be at most the window ({window} s)")
        self.half_life = None if half_life is None else _positive_seconds("half_life", half_life)
        self.version = 0
        """Counts start and stop calls, so what is built on the GPUs held knows when they
        moved."""
        self._meters: dict[str, _Meter] = {}
        self._paths: dict[tuple[str, ...], list[_Meter]] = {}
        self._clock = -math.inf

    def __repr__(self) -> str:
        decay = "" if self.half_life is None else f", half_life={self.half_life:g}"
        return f"UsageTracker(window={self.window:g}, bucket={self.bucket:g}{decay})"

    @property
    def readings_version(self) -> int:
        """Always 0: usage read at a time never reads differently at that time. Starts and
        stops at `now` change only what accrues after it, and time does not go back."""
        return 0

    def start(self, account: str, gpus: float, now: float) -> None:
        """The account starts holding `gpus` more GPUs at `now`."""
        path = account_ancestors(account)
        gpus = _positive_gpus(gpus)
        self._advance_clock(now)
        for meter in self._meters_on_path(path, now):
            meter.rate += gpus
        self.version += 1

    def stop(self, account: str, gpus: float, now: float) -> None:
        """The account stops holding `gpus` of its GPUs at `now`."""
        path = account_ancestors(account)
        gpus = _positive_gpus(gpus)
        held = self.running(account)
        if gpus > held + _GPU_EPSILON:
            raise InputError("gpus", gpus, f"is more than the {held:g} GPUs {account} holds")
        self._advance_clock(now)
        for meter in self._meters_on_path(path, now):
            meter.rate -= gpus
            if abs(meter.rate) < _GPU_EPSILON:
                meter.rate = 0.0
        self.version += 1

    def running(self, account: str) -> float:
        """GPUs the account's subtree holds now (ROOT: the whole cluster)."""
        meter = self._meters.get(account)
        if meter is not None:
            return meter.rate  # a metered account's path was checked when it started
        if account != ROOT:
            account_ancestors(account)
        return 0.0

    def usage(self, account: str, now: float) -> float:
        """GPU-seconds of the account's subtree within the window at `now` (decayed if set)."""
        meter = self._meters.get(account)
        if meter is None and account != ROOT:
            account_ancestors(account)  # only to reject a malformed path; known ones are valid
        self._advance_clock(now)
        if meter is None:
            return 0.0
        self._bring_up_to(meter, now)
        total = meter.total
        if self.half_life is not None:
            total *= 2.0 ** (-(now - meter.reference) / self.half_life)
        # Subtracting expired buckets from a float running total can leave -1e-12.
        return max(total, 0.0)

    # ----------------------------------------------------------------------------- internals

    def _advance_clock(self, now: Any) -> None:
        if now.__class__ is float and -math.inf < self._clock <= now < math.inf:
            self._clock = now  # the common case, every read of a cycle: a later finite time
            return
        if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
            raise InputError("now", now, "must be a finite number of seconds")
        if now < self._clock:
            raise InputError(
                "now", now, f"is before {self._clock:g}, a time already seen; time cannot go back"
            )
        self._clock = float(now)

    def _meters_on_path(self, path: tuple[str, ...], now: float) -> list[_Meter]:
        """The meters of the cluster and of every account on `path` (made on first use; a
        meter is never dropped, so the list is kept per path), each brought up to `now`."""
        meters = self._paths.get(path)
        if meters is None:
            meters = []
            for account in (ROOT, *path):
                meter = self._meters.get(account)
                if meter is None:
                    meter = self._meters[account] = _Meter(now)
                meters.append(meter)
            self._paths[path] = meters
        for meter in meters:
            self._bring_up_to(meter, now)
        return meters

    def _bring_up_to(self, meter: _Meter, now: float) -> None:
        """Accrue the meter's running GPUs up to `now`, then drop buckets out of the window."""
        if meter.accrued_until == now:
            return  # brought up to `now` already (or made at `now`): nothing accrued or expired
        if self.half_life is not None and now - meter.reference > (
            _REBASE_AFTER_HALF_LIVES * self.half_life
        ):
            self._rebase(meter, now)
        oldest_counted = math.floor((now - self.window) / self.bucket)
        since = meter.accrued_until
        meter.accrued_until = now
        if meter.rate > 0 and now > since:
            # GPU-seconds from before the oldest counted bucket would expire at once: skip them,
            # so a job that ran for months without events costs one window of buckets, not more.
            index = max(math.floor(since / self.bucket), oldest_counted)
            begin = max(since, index * self.bucket)
            while begin < now:
                end = min((index + 1) * self.bucket, now)
                if end > begin:
                    self._deposit(meter, index, self._accrued(meter, begin, end))
                    begin = end
                index += 1
        while meter.indices and meter.indices[0] < oldest_counted:
            meter.indices.popleft()
            meter.total -= meter.values.popleft()
        if not meter.indices:
            meter.total = 0.0

    def _accrued(self, meter: _Meter, begin: float, end: float) -> float:
        """GPU-seconds of the rate over [begin, end), scaled to the reference if decaying."""
        if self.half_life is None:
            return meter.rate * (end - begin)
        # Integral of rate * 2**((t - reference) / h) dt; expm1 keeps short spans accurate.
        e_folding_time = self.half_life / math.log(2.0)
        growth: float = 2.0 ** ((begin - meter.reference) / self.half_life)
        return meter.rate * e_folding_time * growth * math.expm1((end - begin) / e_folding_time)

    @staticmethod
    def _deposit(meter: _Meter, index: int, gpu_seconds: float) -> None:
        if meter.indices and meter.indices[-1] == index:
            meter.values[-1] += gpu_seconds
        else:
            meter.indices.append(index)
            meter.values.append(gpu_seconds)
        meter.total += gpu_seconds

    def _rebase(self, meter: _Meter, now: float) -> None:
        assert self.half_life is not None
        scale = 2.0 ** (-(now - meter.reference) / self.half_life)
        meter.values = deque(value * scale for value in meter.values)
        meter.total = math.fsum(meter.values)
        meter.reference = now


def _positive_seconds(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(field, value, "must be a number of seconds > 0")
    if not math.isfinite(value) or value <= 0:
        raise InputError(field, value, "must be a number of seconds > 0")
    return float(value)


def _positive_gpus(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError("gpus", value, "must be a number of GPUs > 0")
    if not math.isfinite(value) or value <= 0:
        raise InputError("gpus", value, "must be a number of GPUs > 0")
    return float(value)
