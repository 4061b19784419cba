"""Training and validation loss curves of several runs in one figure, from their metrics.jsonl.

    python3 bench/plot_loss.py OUT.svg LABEL=path/metrics.jsonl [LABEL=path ...] [--title TEXT]

Training loss is drawn thin (a running mean over 20 logged steps), validation loss as markers on a
thicker line of the same colour. Needs matplotlib. Prints each run's final validation loss and its
difference from the first run's.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    train, val = [], []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if "val_loss" in row:
                val.append((row["step"], row["val_loss"]))
            elif "loss" in row and not row.get("skipped"):
                train.append((row["step"], row["loss"]))
    return train, val


def running_mean(xs, n=20):
    out, acc = [], []
    for x in xs:
        acc.append(x)
        if len(acc) > n:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def main(argv):
    title = None
    if "--title" in argv:
        i = argv.index("--title")
        title = argv[i + 1]
        argv = argv[:i] + argv[i + 2 :]
    out, runs = argv[0], [a.split("=", 1) for a in argv[1:]]
    fig, ax = plt.subplots(figsize=(8, 5))
    finals = []
    for label, path in runs:
        train, val = read(path)
        (line,) = ax.plot([s for s, _ in train], running_mean([l for _, l in train]), linewidth=0.8, alpha=0.6, label=f"{label} train")
        if val:
            ax.plot([s for s, _ in val], [l for _, l in val], marker="o", linewidth=1.8, color=line.get_color(), label=f"{label} val")
            finals.append((label, val[-1][1]))
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    if finals:
        base = finals[0][1]
        for label, v in finals:
            print(f"{label}: final val_loss {v:.4f} ({100 * (v - base) / base:+.2f}% against {finals[0][0]})")


if __name__ == "__main__":
    main(sys.argv[1:])
