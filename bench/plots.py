"""PNG plots from a benchmark run's numbers (bench/results.json, written by `python -m bench`).

`python -m bench` calls `make_plots` after its workloads; to redraw from the saved numbers:

    python -m bench.plots [--results bench/results.json] [--out bench/plots]

Plots (each drawn when its workload is in the results): decode tokens/s against batch size,
ours and transformers (and llama.cpp when it ran); W3/W4/W7 end-to-end time, ours next to its
peer; KV pages of W3 (peak, ideal, private copies) and W7.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
OURS, PEER, THIRD = "#2b6cb0", "#c05621", "#718096"


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _decode(plt, d: dict, out: Path) -> Path:
    rows = d["rows"]
    b = [r["batch"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in ((axes[0], "decode", "decode only"), (axes[1], "e2e", "end to end (prefill + decode)")):
        ax.plot(b, [r[f"ours_{key}"] for r in rows], "o-", color=OURS, label="ours (Symphony)")
        ax.plot(b, [r[f"hf_{key}"] for r in rows], "s-", color=PEER, label="transformers generate")
        if all(f"llama_{key}" in r for r in rows):
            ax.plot(b, [r[f"llama_{key}"] for r in rows], "^-", color=THIRD, label="llama.cpp (one at a time)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(b, [str(x) for x in b])
        ax.set_xlabel("sequences decoded together")
        ax.set_ylabel("new tokens / s")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"Greedy decode, {d['new']} new tokens per sequence (median of {d['repeats']})")
    fig.tight_layout()
    path = out / "decode_tokens_per_s.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _bars(ax, labels, values, colors, unit="s"):
    bars = ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, fontsize=8)
    for bar, v in zip(bars, values):
        ax.annotate(
            f"{v:.1f} {unit}" if unit else f"{v:g}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.margins(y=0.15)


def _programs(plt, res: dict, out: Path) -> Path | None:
    panels = []
    if "shared_prefix" in res:
        r = res["shared_prefix"]
        panels.append(
            (
                f"W3 shared prefix: {r['ratio']:.2f}×",
                ["ours\n(prefill once, fork)", "transformers\n(full prompts)"],
                [r["ours_s"], r["hf_s"]],
                [OURS, PEER],
            )
        )
    if "agents" in res:
        r = res["agents"]
        labels, vals, cols = (
            ["ours: LIP\non the server", "client loop\n/v1/completions"],
            [r["lip_server_s"], r["client_s"]],
            [OURS, PEER],
        )
        if r.get("lip_embedded_s"):
            labels.append("ours: LIP\nembedded")
            vals.append(r["lip_embedded_s"])
            cols.append(THIRD)
        panels.append((f"W4 ReAct agents: {r['ratio']:.2f}×", labels, vals, cols))
    if "graph_of_thought" in res:
        r = res["graph_of_thought"]
        panels.append(
            (
                f"W7 graph of thought: {r['ratio']:.2f}×",
                ["ours\n(forks)", "independent\nprompts"],
                [r["ours_s"], r["independent_s"]],
                [OURS, PEER],
            )
        )
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), squeeze=False)
    for ax, (title, labels, vals, cols) in zip(axes[0], panels):
        _bars(ax, labels, vals, cols)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("end-to-end seconds (lower is better)")
    fig.suptitle("Serving programs vs serving prompts (median end-to-end time)")
    fig.tight_layout()
    path = out / "programs_vs_prompts.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pages(plt, res: dict, out: Path) -> Path | None:
    panels = []
    if "shared_prefix" in res:
        r = res["shared_prefix"]
        panels.append(
            (
                f"W3: peak = {r['pages_ratio']:.2f}× ideal",
                ["ours, peak", "ideal", "private copies"],
                [r["peak_pages"], r["ideal_pages"], r["copies_pages"]],
                [OURS, THIRD, PEER],
            )
        )
    if "graph_of_thought" in res:
        r = res["graph_of_thought"]
        panels.append(
            (
                "W7: pages allocated over the run",
                ["ours", "independent\nprompts"],
                [r["ours_allocated"], r["independent_allocated"]],
                [OURS, PEER],
            )
        )
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), squeeze=False)
    for ax, (title, labels, vals, cols) in zip(axes[0], panels):
        _bars(ax, labels, vals, cols, unit="")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("KV pages")
    fig.tight_layout()
    path = out / "kv_pages.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _weights(plt, res: dict, out: Path) -> Path | None:
    """Decode tok/s against sequences for each weight format and llama.cpp variant; prefill beside it."""
    w = res.get("weights")
    if not w or not w.get("rows"):
        return None
    b = w["batches"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [2, 1]})
    for r in w["rows"]:
        ours = r["engine"].startswith("ours")
        axes[0].plot(b, [r[f"decode_{x}"] for x in b], "o-" if ours else "^--", label=r["engine"])
    axes[0].set_xscale("log", base=2)
    axes[0].set_xticks(b, [str(x) for x in b])
    axes[0].set_xlabel("sequences decoded together")
    axes[0].set_ylabel("new tokens / s")
    axes[0].set_title(f"greedy decode, {w['new']} new tokens")
    axes[0].grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    names = [r["engine"].replace("llama.cpp ", "llama ") for r in w["rows"]]
    axes[1].barh(
        names, [r["prefill"] for r in w["rows"]], color=[OURS if n.startswith("ours") else PEER for n in names]
    )
    axes[1].set_xlabel("prefill tokens / s")
    axes[1].set_title(f"prefill {w['prefill']} tokens")
    fig.tight_layout()
    path = out / "weights_vs_llama_cpp.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def make_plots(results: dict, out: Path) -> list[Path]:
    """Draw every plot the results allow into `out`; returns the files written."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    if "decode" in results and results["decode"].get("rows"):
        paths.append(_decode(plt, results["decode"], out))
    for fn in (_programs, _pages, _weights):
        p = fn(plt, results, out)
        if p is not None:
            paths.append(p)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results.json")
    ap.add_argument("--out", type=Path, default=HERE / "plots")
    args = ap.parse_args(argv)
    for p in make_plots(json.loads(args.results.read_text()), args.out):
        print(f"wrote {p}")


if __name__ == "__main__":
    main()
