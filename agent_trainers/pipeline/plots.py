"""Metrics as JSON lines, and PNG plots of them (matplotlib, Agg backend)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_gym.core.files import json_lines

__all__ = ["MetricsLog", "plot_curves", "plot_metrics", "read_jsonl"]


class MetricsLog:
    """Appends one JSON object per line to ``path`` (kept across ``--resume``).

    Args:
        path: The ``.jsonl`` file (parent folders are created).
        enabled: False drops every record (the non-zero ranks of a multi-process run).
    """

    def __init__(self, path: str | Path, *, enabled: bool = True):
        self.path, self.enabled = Path(path), enabled
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: Mapping[str, Any]) -> None:
        """Append ``record`` (values must be JSON-serialisable)."""
        if not self.enabled:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(dict(record), sort_keys=True) + "\n")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All records of a JSONL file (``[]`` if it does not exist)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in json_lines(path.read_text(encoding="utf-8")) if line.strip()]


def plot_metrics(
    records: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    keys: Sequence[str],
    x: str = "step",
    title: str = "",
    titles: Mapping[str, str] | None = None,
) -> Path | None:
    """Plot ``keys`` against ``x`` (one panel per key, titled ``titles[key]`` or the key) and save a PNG.

    Records lacking ``x`` or a key are skipped for that key. Records whose
    ``phase`` is ``"before"`` (the untrained model) are drawn as separate red
    crosses rather than joined to the training curve, which starts at the same
    step.

    Returns:
        The PNG path, or None if nothing could be plotted.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    usable = [r for r in records if x in r]
    series = {
        k: [(r[x], r[k], r.get("phase") == "before") for r in usable if isinstance(r.get(k), int | float)] for k in keys
    }
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3.2), squeeze=False)
    for ax, (key, points) in zip(axes[0], series.items(), strict=True):
        curve = [(px, py) for px, py, before in points if not before]
        base = [(px, py) for px, py, before in points if before]
        if curve:
            ax.plot(*zip(*curve, strict=True), marker="o", label="trained")
        if base:
            ax.scatter(*zip(*base, strict=True), marker="x", color="red", s=60, zorder=3, label="before training")
            ax.legend(fontsize=8)
        ax.set_xlabel(x)
        ax.set_title((titles or {}).get(key, key))
        ax.grid(alpha=0.3)
    return _save(fig, path, title)


def plot_curves(
    records: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    keys: Sequence[str],
    title: str = "",
    titles: Mapping[str, str] | None = None,
    reference: str = "after_sft",
) -> Path | None:
    """Held-aside learning curves: each key's mean against the RL step with its 95% band, and the level of the
    ``reference`` phase (the SFT checkpoint) as a dashed line.

    ``records`` are eval records of ``metrics.jsonl`` (``phase``, ``step``, ``<key>`` and, when logged,
    ``<key>_low`` / ``<key>_high``). The reference phase is drawn as a line across the plot, not as a point
    of the curve; ``before`` (the untrained model) as a red cross.

    Returns:
        The PNG path, or None if nothing could be plotted.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in keys if any(isinstance(r.get(k), int | float) for r in records)]
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        have = [r for r in records if isinstance(r.get(key), int | float) and "step" in r]
        curve = sorted((r for r in have if r.get("phase") not in ("before", reference)), key=lambda r: r["step"])
        if curve:
            steps = [r["step"] for r in curve]
            ax.plot(steps, [r[key] for r in curve], marker="o", label="RL")
            banded = [r for r in curve if f"{key}_low" in r and f"{key}_high" in r]
            if banded:
                ax.fill_between([r["step"] for r in banded], [r[f"{key}_low"] for r in banded],
                                [r[f"{key}_high"] for r in banded], alpha=0.2, label="95% interval")  # fmt: skip
        for r in (r for r in have if r.get("phase") == reference):
            ax.axhline(r[key], color="gray", linestyle="--", label="SFT")
            if f"{key}_low" in r and f"{key}_high" in r:
                ax.axhspan(r[f"{key}_low"], r[f"{key}_high"], color="gray", alpha=0.1)
        for r in (r for r in have if r.get("phase") == "before"):
            ax.scatter([r["step"]], [r[key]], marker="x", color="red", s=60, zorder=3, label="before training")
        ax.set_xlabel("RL step")
        ax.set_title((titles or {}).get(key, key))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path, title)


def _save(fig: Any, path: str | Path, title: str) -> Path:
    """Title, lay out, write and close a figure."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
