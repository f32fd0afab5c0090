"""``python -m dualbcast``: the EAM energy of the Zygote thread, value and gradient.

E(x) = p^2 + p^3 + p^4/4 with p = sum_i rho(x_i), rho(r) = exp(-3(r + 1)), written as
plain Python and differentiated by ``value_and_grad``: ``rho.sum(x)`` gives the sum and
its gradient from one fused loop, the reverse-mode tape does the outer chain rule.
The result is checked against the hand-written gradient and timed beside it, eager
(``energy`` runs on every call) and under ``jit`` (recorded once, then replayed).
"""
import argparse
import math
import time

import numpy as np

from . import fast_broadcast, jit, value_and_grad


@fast_broadcast
def rho(r):
    return math.exp(-3.0 * (r + 1.0))


def energy(x):
    p = rho.sum(x)                  # fused sum-of-map: rho(x) is never materialised
    return p ** 2 + p ** 3 + 0.25 * p ** 4


eam_value_and_grad = value_and_grad(energy)
eam_jitted = jit(eam_value_and_grad)


def eam_hand_written(x):
    """The gradient a physicist writes by hand, in NumPy."""
    e = np.exp(-3.0 * (x + 1.0))
    p = e.sum()
    return p ** 2 + p ** 3 + 0.25 * p ** 4, (2 * p + 3 * p ** 2 + p ** 3) * (-3.0 * e)


def best_time(f, *args, repeat=7):
    """Best of ``repeat`` timings, each over enough calls to last ~20 ms."""
    number = max(1, int(0.02 / max(_once(f, *args), 1e-7)))
    return min(_once(f, *args, number=number) for _ in range(repeat))


def _once(f, *args, number=1):
    start = time.perf_counter()
    for _ in range(number):
        f(*args)
    return (time.perf_counter() - start) / number


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m dualbcast", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10 ** 6, help="number of atoms (default 10^6)")
    n = parser.parse_args(argv).n
    x = np.random.default_rng(0).random(n)

    start = time.perf_counter()
    energy, grad = eam_value_and_grad(x)
    first_call = time.perf_counter() - start
    ref_energy, ref_grad = eam_hand_written(x)
    error = np.max(np.abs(grad - ref_grad)) / max(np.max(np.abs(ref_grad)), 1e-300)

    jitted_energy, jitted_grad = [eam_jitted(x) for _ in range(3)][-1]   # (its final form)
    ours, numpy_time = best_time(eam_value_and_grad, x), best_time(eam_hand_written, x)
    jitted = best_time(eam_jitted, x)
    print(f"EAM energy of {n} atoms: E = {energy:.12g} (hand-written: {ref_energy:.12g})")
    print(f"gradient: max relative difference to the hand-written gradient {error:.1e}")
    print(f"first call (compiles the fused dual-number loop): {first_call:.2f} s")
    print(f"value and gradient: dualbcast {ours * 1e6:.1f} us, with jit {jitted * 1e6:.1f} us, "
          f"hand-written NumPy {numpy_time * 1e6:.1f} us (ratio {ours / numpy_time:.2f})")
    if not (abs(energy - ref_energy) <= 1e-10 * abs(ref_energy) and error < 1e-10):
        raise SystemExit("gradient check FAILED")
    if jitted_energy != energy or not np.array_equal(jitted_grad, grad):
        raise SystemExit("jit check FAILED: it differs from the eager gradient")


if __name__ == "__main__":
    main()
