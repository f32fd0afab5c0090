"""Plot the EAM value-and-gradient time against N for every installed system, every
point timed in this one process, into ``asv_bench/eam_time_vs_n.png`` (the README's
figure).  Needs matplotlib (``pip install -e .[plot]``).

    python asv_bench/plot.py            # from the repository root
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from benchmarks.bench_kernels import best_time  # noqa: E402
from benchmarks.gradients import SYSTEMS, eam, warmed_up  # noqa: E402

SIZES = [10 ** k for k in range(2, 7)]
LABELS = {"dualbcast": "dualbcast", "dualbcast_jit": "dualbcast jit",
          "numba": "numba.njit by hand (libm exp)",
          "numba_limit": "numba by hand, vectorised exp, 2 threads",
          "jax": "JAX jit", "torch": "PyTorch eager", "autograd": "autograd"}


def measure():
    times = {}
    for system in SYSTEMS:
        for n in SIZES:
            try:
                call = warmed_up(eam(system, n), system)
            except NotImplementedError:
                break
            # best of three: one best_time is 50 ms, and this machine is noisy
            times.setdefault(system, []).append(min(best_time(call) for _ in range(3)))
    return times


def main():
    times = measure()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for system, seconds in times.items():
        style = "-o" if system == "dualbcast" else "--."
        axes.loglog(SIZES[:len(seconds)], [s * 1e6 for s in seconds], style,
                    label=LABELS[system], linewidth=2.5 if system == "dualbcast" else 1.2)
    axes.set_xlabel("N (elements)")
    axes.set_ylabel("value and gradient, µs (best of repeats)")
    axes.set_title("EAM energy E = p² + p³ + p⁴/4, p = Σ exp(-3(x+1))")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path = os.path.join(HERE, "eam_time_vs_n.png")
    figure.savefig(path, dpi=110)
    for system, seconds in times.items():
        print(system, " ".join(f"{s * 1e6:.1f}" for s in seconds), "µs")
    print("wrote", path)


if __name__ == "__main__":
    main()
