"""Print the README's benchmark tables, every system timed in this one process:
gradients of whole programs beside a hand-written ``numba.njit`` gradient, JAX, PyTorch
and autograd (those installed), then each kernel mode beside hand-written Numba and
NumPy.

    python asv_bench/report.py            # from the repository root
"""
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchmarks.bench_kernels import MODES, best_time  # noqa: E402
from benchmarks.gradients import CASES, SYSTEMS, make_call  # noqa: E402
from benchmarks.workloads import SIZES, WORKLOADS, inputs  # noqa: E402


def first_call_seconds():
    """Seconds to the first call of a new kernel in each mode, compiling (an empty
    disk cache: a loaded loop would take milliseconds)."""
    import tempfile

    import dualbcast as db

    seconds = {}
    saved = db.config.cache_dir
    with tempfile.TemporaryDirectory() as empty:
        db.config.cache_dir = empty
        try:
            for mode in MODES:
                seconds[mode] = _first_call(db, mode)
        finally:
            db.config.cache_dir = saved
    return seconds


def _first_call(db, mode):
    @db.fast_broadcast
    def morse(r, d, a, r0):
        e = math.exp(-a * (r - r0))
        return d * (1.0 - e) ** 2

    x = inputs(1000)
    start = time.perf_counter()
    if mode == "value":
        morse(x, 1.2, 1.5, 1.0)
    else:
        getattr(morse, mode)(x, 1.2, 1.5, 1.0, wrt=(0, 2))
    return time.perf_counter() - start


def gradient_table():
    names = {"dualbcast": "dualbcast", "dualbcast_jit": "dualbcast jit",
             "numba": "numba.njit by hand",
             "numba_limit": "by hand, vectorised exp + threads", "jax": "JAX jit",
             "torch": "PyTorch eager", "autograd": "autograd"}
    print("| case | " + " | ".join(names[s] for s in SYSTEMS) +
          " | eager / JAX | jit / JAX |")
    print("|---" * (len(SYSTEMS) + 3) + "|")
    for case in CASES:
        calls = {}
        for system in SYSTEMS:
            try:
                calls[system] = make_call(case, system)
            except NotImplementedError:
                pass
        # The systems timed in turns, five rounds, each keeping its best: a burst of
        # load on this shared machine then hits every system alike.
        times = dict.fromkeys(calls, math.inf)
        for _ in range(5):
            for system, call in calls.items():
                times[system] = min(times[system], best_time(call, repeat=2))
        cells = " | ".join(f"{times[s] * 1e6:.1f} µs" if s in times else "–" for s in SYSTEMS)
        ratios = " | ".join(f"{times[ours] / times['jax']:.2f}" if "jax" in times else "–"
                            for ours in ("dualbcast", "dualbcast_jit"))
        print(f"| {case} | {cells} | {ratios} |")


def indexing_table():
    from benchmarks import bench_indexing as bi

    print("| LJ pair energy over X[i] - X[j] | dualbcast value_and_grad / NumPy by hand |")
    print("|---|---|")
    for n_atoms in bi.PairEnergyIndexing.params:
        bench = bi.PairEnergyIndexing()
        bench.setup(n_atoms)
        print(f"| {n_atoms} atoms | {bench.track_ratio_to_numpy(n_atoms):.2f} |")


def performance_table():
    from benchmarks import bench_performance as bp

    folds = {}
    for tape in bp.FoldPerOp.params:
        folds[tape] = bp.FoldPerOp()
        folds[tape].setup(tape)
    first = bp.FirstGradient()
    jit_final = bp.JitFinalForm()
    numba_first = bp.FirstGradientNumba()
    memory = bp.Memory()
    threads = bp.Threads()
    threads.setup()
    rows = []
    for tape, fold in folds.items():
        rows += [(f"16-term fold, per recorded op (whole gradient / 15), {tape}",
                  f"{fold.track_whole_gradient_microseconds_per_op(tape):.2f} µs"),
                 (f"fold, marginal cost per extra term (an op and an argument), {tape}",
                  f"{fold.track_marginal_microseconds_per_op(tape):.2f} µs"),
                 (f"fold, marginal cost per extra op on the same arguments, {tape}",
                  f"{fold.track_marginal_microseconds_per_op_same_leaves(tape):.2f} µs")]
    rows += [
        ("first EAM gradient, fresh process, empty cache",
         f"{first.track_seconds_empty_cache():.2f} s"),
        ("first EAM gradient, fresh process, warm cache",
         f"{first.track_seconds_warm_cache():.2f} s"),
        ("db.jit EAM gradient in its final form (three calls), fresh process, empty cache",
         f"{jit_final.track_seconds_empty_cache():.2f} s"),
        ("the same, warm cache", f"{jit_final.track_seconds_warm_cache():.2f} s"),
        ("first EAM gradient, fresh process, numba.njit by hand",
         f"{numba_first.track_seconds_hand_written():.2f} s"),
        ("first call of a trivial numba.njit function, fresh process",
         f"{numba_first.track_seconds_trivial_function():.2f} s"),
        ("value_and_grad of a sum-of-map, 10^7: allocated / gradient bytes",
         f"{memory.track_allocated_over_gradient_1e7():.4f}"),
        ("the same with out=", f"{memory.track_allocated_over_gradient_1e7_into_out():.4f}"),
        ("EAM 10^6: two threads / one", f"{threads.track_two_threads_over_one_eam_1e6():.2f}"),
    ]
    try:
        jax_first = bp.FirstGradientJax()
        jax_first.setup()
        rows.insert(6, ("first gradient, fresh process, JAX", f"{jax_first.track_seconds():.2f} s"))
    except NotImplementedError:
        pass
    threads.teardown()
    print("| measurement | value |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    print()
    print("| function | dualbcast.vmath | libm (math.*) | speed-up |")
    print("|---|---|---|---|")
    for function in bp.VECTORISED:
        ns = {}
        for implementation in ("dualbcast", "libm"):
            bench = bp.VectorMath()
            bench.setup(function, implementation)
            ns[implementation] = bench.track_ns_per_element(function, implementation)
        print(f"| {function} | {ns['dualbcast']:.2f} ns | {ns['libm']:.2f} ns | "
              f"{ns['libm'] / ns['dualbcast']:.1f}x |")


def main():
    gradient_table()
    print()
    indexing_table()
    print()
    performance_table()
    print()
    print("| workload | mode | N | dualbcast | numba.njit by hand | NumPy | dualbcast / numba |")
    print("|---|---|---|---|---|---|---|")
    for workload, make_calls in WORKLOADS.items():
        for mode in MODES:
            for n in SIZES:
                calls = make_calls(inputs(n))[mode]
                times = {system: best_time(call) for system, call in calls.items()}
                cells = " | ".join(f"{times[s] * 1e6:.1f} µs"
                                   for s in ("dualbcast", "numba", "numpy"))
                print(f"| {workload} | {mode} | {n:.0e} | {cells} | "
                      f"{times['dualbcast'] / times['numba']:.2f} |")
    print()
    print("First call of a new 4-argument kernel (compile included), seconds:",
          ", ".join(f"{mode} {s:.2f}" for mode, s in first_call_seconds().items()))


if __name__ == "__main__":
    main()
