"""An instance's counters: the Prometheus text and the same as a dict."""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, Mapping, Union

_SAMPLE = re.compile(r'^ectier_([a-zA-Z0-9_]+?)(?:\{(\w+)="([^"]*)"\})? (\S+)$')

Number = Union[int, float]


def _number(text: str) -> Number:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


class Metrics(Mapping[str, Any]):
    """A snapshot of the scheduler side's metrics.

    ``text`` is the Prometheus text exposition (every name starts with
    ``ectier_``).  As a mapping, each metric is keyed by its name without the
    prefix: counters and gauges are numbers; a labelled metric is a dict by
    label value (``m["acks_received_total"]["nack_missing"]``); a histogram
    is ``{"buckets": {le: cumulative count}, "sum": s, "count": n}``.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        values: Dict[str, Any] = {}
        histograms = set()
        for line in text.splitlines():
            if line.startswith("# TYPE ") and line.endswith(" histogram"):
                histograms.add(line.split()[2][len("ectier_") :])
                continue
            m = _SAMPLE.match(line)
            if m is None:
                continue
            name, label, label_value, number = m.groups()
            value = _number(number)
            base = next(
                (h for h in histograms if name in (h + "_bucket", h + "_sum", h + "_count")), None
            )
            if base is not None:
                h = values.setdefault(base, {"buckets": {}, "sum": 0, "count": 0})
                if name.endswith("_bucket"):
                    h["buckets"][label_value] = value
                else:
                    h[name[len(base) + 1 :]] = value
            elif label is not None:
                values.setdefault(name, {})[label_value] = value
            else:
                values[name] = value
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def as_dict(self) -> Dict[str, Any]:
        """A plain dict copy of the values."""
        return dict(self._values)

    def __repr__(self) -> str:
        return f"<ectier.Metrics {len(self)} metrics>"
