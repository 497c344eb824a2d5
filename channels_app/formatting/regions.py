"""The regions of the model's Markdown a cut may fall inside only if it mends them (a
span's markers) or never (a link's address, a code block), and which of them an offset is
inside. Asked at every candidate cut, so answered by bisection over where regions begin
and end, not by going through them all: a long paragraph has thousands of spans and
thousands of candidates."""
from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple

DEEPEST = 64  # regions inside one another kept per gap; deeper (pathological) nesting is scanned


class Region(NamedTuple):
    low: int  # a cut strictly between low and high is inside
    high: int  # inline code's reaches over its closing backticks (see Regions.blank_side)
    closing: str | None  # None: never cut inside
    opening: str


class Regions:
    """`regions` of `text`, found by the offsets they contain."""

    def __init__(self, text: str, regions: list[Region]) -> None:
        # Outermost first: by where they begin, then the longer; as found where alike.
        self.ordered = sorted(regions, key=lambda r: (r.low, -r.high))
        self._ink: dict[int, tuple[int, int]] = {}  # rank -> (first non-space, one past the last)
        for rank, region in enumerate(self.ordered):
            # What it holds between its markers: its opening marker, when it begins with it (a
            # span's, a link's `[`), and its closing one, when it reaches over it (inline code's).
            span = text[region.low:region.high].removesuffix(region.closing or "")
            if region.opening and span.startswith(region.opening):
                span = " " * len(region.opening) + span[len(region.opening):]
            self._ink[rank] = (region.low + len(span) - len(span.lstrip()), region.low + len(span.rstrip()))
        self.points: list[int] | None = []
        self._on: list[tuple[int, ...]] = []  # ranks inside at each point
        self._after: list[tuple[int, ...]] = []  # ranks inside between it and the next
        starts: dict[int, list[int]] = {}
        ends: dict[int, list[int]] = {}
        for rank, region in enumerate(self.ordered):
            if region.low < region.high:
                starts.setdefault(region.low, []).append(rank)
                ends.setdefault(region.high, []).append(rank)
        active: set[int] = set()
        for point in sorted({*starts, *ends}):
            active.difference_update(ends.get(point, ()))
            self._on.append(tuple(sorted(active)))
            active.update(starts.get(point, ()))
            if len(active) > DEEPEST:
                self.points = None
                break
            self._after.append(tuple(sorted(active)))
            self.points.append(point)

    def around(self, at: int) -> list[tuple[int, Region]]:
        """(rank, region) of the regions with `at` strictly inside, outermost first."""
        if self.points is None:
            return [(rank, r) for rank, r in enumerate(self.ordered) if r.low < at < r.high]
        i = bisect_right(self.points, at) - 1
        if i < 0:
            return []
        ranks = self._on[i] if self.points[i] == at else self._after[i]
        return [(rank, self.ordered[rank]) for rank in ranks]

    def blank_side(self, rank: int, at: int) -> bool:
        """Whether the region of `rank` has nothing but white space on one side of `at` (its
        markers left out): the piece on that side would hold its markers with nothing between
        them, which read otherwise (another run of backticks, a link with no label)."""
        first, last = self._ink[rank]
        return first >= at or last <= at
