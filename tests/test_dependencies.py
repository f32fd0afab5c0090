"""A kernel computes with the values its names have when it is called: every mode,
grad and jit's replays (fused too) agree after a global, a closure variable, a
module's attribute, a helper's global or a global array's contents change.  (The disk
cache's side of it, across processes, is in test_cache.py.)"""
import math
import sys
import types

import numba
import numpy as np
import pytest

import dualbcast as db

X = np.linspace(0.5, 1.5, 9)
SCALE = 1.0


def _every_mode(kernel, x, *rest):
    """Each mode's value summed, and the gradients of the sum by every route."""
    values = {
        "map": kernel(x, *rest).sum(),
        "sum": kernel.sum(x, *rest),
        "partials": kernel.value_and_partials(x, *rest)[0].sum(),
        "sum_partials": kernel.sum_and_partials(x, *rest)[0],
    }
    grads = {
        "partials": kernel.value_and_partials(x, *rest)[1],
        "sum_partials": kernel.sum_and_partials(x, *rest)[1],
        "grad of sum": db.grad(lambda x: kernel.sum(x, *rest))(x),
        "grad of map": db.grad(lambda x: np.sum(kernel(x, *rest)))(x),
    }
    return values, grads


def _assert_every_mode(kernel, value, grad, *rest):
    values, grads = _every_mode(kernel, X, *rest)
    for mode, got in values.items():
        assert got == pytest.approx(np.sum(value), rel=1e-14), mode
    for route, got in grads.items():
        np.testing.assert_allclose(got, grad, rtol=1e-14, err_msg=route)


def test_a_rebound_global_is_seen_by_every_mode():
    global SCALE

    @db.fast_broadcast
    def k(x):
        return SCALE * x * x

    try:
        SCALE = 1.0
        _assert_every_mode(k, X * X, 2 * X)
        SCALE = 2.0
        _assert_every_mode(k, 2 * X * X, 4 * X)
    finally:
        SCALE = 1.0


def test_a_rebound_closure_variable_is_seen():
    scale = 1.0

    @db.fast_broadcast
    def k(x):
        return scale * math.exp(x)

    _assert_every_mode(k, np.exp(X), np.exp(X))
    scale = 3.0
    _assert_every_mode(k, 3 * np.exp(X), 3 * np.exp(X))


def test_a_module_attribute_is_seen():
    params = types.ModuleType("dualbcast_test_params")
    params.SCALE = 2.0
    sys.modules[params.__name__] = params
    namespace = {"params": params, "db": db}
    exec("@db.fast_broadcast\ndef k(x):\n    return params.SCALE * x", namespace)
    k = namespace["k"]
    try:
        _assert_every_mode(k, 2 * X, np.full_like(X, 2.0))
        params.SCALE = 5.0
        _assert_every_mode(k, 5 * X, np.full_like(X, 5.0))
    finally:
        del sys.modules[params.__name__]


def test_a_helpers_global_is_seen_even_when_numba_compiled_it_before():
    namespace = {"numba": numba, "db": db, "OFFSET": 1.0}
    exec("@numba.njit\ndef helper(x):\n    return x + OFFSET\n"
         "@db.fast_broadcast\ndef k(x):\n    return helper(x) * x", namespace)
    helper, k = namespace["helper"], namespace["k"]
    assert helper(1.0) == 2.0           # compiled by the user, OFFSET frozen at 1.0
    namespace["OFFSET"] = 4.0
    _assert_every_mode(k, (X + 4.0) * X, 2 * X + 4.0)
    assert helper(1.0) == 5.0           # (compiled again: Python's answer, too)


def test_a_global_arrays_contents_are_seen():
    namespace = {"db": db, "TABLE": np.array([2.0, 3.0])}
    exec("@db.fast_broadcast\ndef k(x):\n    return TABLE[0] * x + TABLE[1]", namespace)
    k, table = namespace["k"], namespace["TABLE"]
    _assert_every_mode(k, 2 * X + 3, np.full_like(X, 2.0))
    table[0] = 7.0                      # changed in place (Numba froze its contents)
    _assert_every_mode(k, 7 * X + 3, np.full_like(X, 7.0))


def test_a_kernel_called_from_a_kernel_follows_its_own_globals():
    namespace = {"db": db, "math": math, "A": 1.0}
    exec("@db.fast_broadcast\ndef inner(x):\n    return A * x\n"
         "@db.fast_broadcast\ndef outer(x):\n    return inner(x) * x", namespace)
    outer = namespace["outer"]
    _assert_every_mode(outer, X * X, 2 * X)
    namespace["A"] = 3.0
    _assert_every_mode(outer, 3 * X * X, 6 * X)


def test_a_global_defined_after_the_kernel_is_found():
    namespace = {"db": db}
    exec("@db.fast_broadcast\ndef k(x):\n    return LATER * x", namespace)
    namespace["LATER"] = 2.0
    _assert_every_mode(namespace["k"], 2 * X, np.full_like(X, 2.0))


def test_a_name_rebound_to_an_equal_value_compiles_nothing():
    namespace = {"db": db, "A": 1.5, "T": (1.0, 2.0)}
    exec("@db.fast_broadcast\ndef k(x):\n    return A * x + T[1]", namespace)
    k = namespace["k"]
    k(X)
    generation = k._current_generation()
    namespace["A"] = float("1.5")       # another object, the same value
    namespace["T"] = (1.0, 2.0)
    k(X)
    assert k._current_generation() == generation
    namespace["A"] = -1.5
    k(X)
    assert k._current_generation() == generation + 1


def test_minus_zero_is_another_value():
    namespace = {"db": db, "A": 0.0}
    exec("@db.fast_broadcast\ndef k(x):\n    return x / A", namespace)
    k = namespace["k"]
    assert k(np.ones(2))[0] == np.inf
    namespace["A"] = -0.0
    assert k(np.ones(2))[0] == -np.inf


def test_jit_replays_see_a_rebound_kernel_global():
    # Enough calls for the program to be generated and fused (the fused program calls
    # the kernel's loop itself): each call must compute with the value of the moment.
    namespace = {"db": db, "math": math, "A": 1.0}
    exec("@db.fast_broadcast\ndef k(x, a):\n    return A * a * math.exp(-x * x)", namespace)
    k = namespace["k"]
    step = db.jit(db.value_and_grad(lambda x: 2.0 * k.sum(x, 1.5) + 1.0))
    for call in range(12):
        scale = 1.0 + (call // 3)
        namespace["A"] = scale
        value, grad = step(X)
        want = scale * 1.5 * np.exp(-X * X)
        assert value == pytest.approx(2 * want.sum() + 1.0, rel=1e-14), call
        np.testing.assert_allclose(grad, 2 * -2 * X * want, rtol=1e-14, err_msg=str(call))


def test_checking_costs_one_identity_test_per_name():
    # What a call pays: the names are compared by identity (a kernel reading only
    # ``math`` watches that name and its own defaults; the library's attributes are
    # not watched).
    namespace = {"db": db, "math": math}
    exec("@db.fast_broadcast\ndef k(x):\n    return math.exp(x) + math.sin(x)", namespace)
    k = namespace["k"]
    k(X)
    assert [key for _, key, _ in k._dependencies._watched] == ["__defaults__", "math"]
    assert not k._dependencies._contents


def test_a_helper_is_compiled_again_only_when_a_name_it_reads_changed():
    namespace = {"numba": numba, "db": db, "OFFSET": 1.0}
    exec("@numba.njit\ndef helper(x):\n    return x + OFFSET\n"
         "@db.fast_broadcast\ndef k1(x):\n    return helper(x)\n"
         "@db.fast_broadcast\ndef k2(x):\n    return 2.0 * helper(x)", namespace)
    helper = namespace["helper"]
    helper(1.0)
    namespace["k1"](X)                  # met with compiled code: compiled again, once
    compiled = helper.overloads[helper.signatures[0]]
    namespace["k2"](X)
    assert helper.overloads[helper.signatures[0]] is compiled
    namespace["OFFSET"] = 2.0
    np.testing.assert_array_equal(namespace["k2"](X), 2.0 * (X + 2.0))
    assert helper.overloads[helper.signatures[0]] is not compiled
    np.testing.assert_array_equal(namespace["k1"](X), X + 2.0)


def test_a_large_global_table_is_compared_without_a_copy_per_call():
    import tracemalloc
    namespace = {"db": db, "TABLE": np.linspace(0.0, 1.0, 1 << 15)}
    exec("@db.fast_broadcast\ndef k(x):\n    return TABLE[3] * x", namespace)
    k, table = namespace["k"], namespace["TABLE"]
    k(X)
    tracemalloc.start()
    try:
        k(X)
        assert tracemalloc.get_traced_memory()[1] < table.nbytes / 2
    finally:
        tracemalloc.stop()
    table[3] = np.nan
    assert np.isnan(k(X)).all()


def test_a_helper_called_by_a_helper_is_compiled_again_first():
    # (helper1 was recompiled before helper2, and linked helper2's stale code)
    namespace = {"numba": numba, "db": db, "G": 1.0}
    exec("@numba.njit\ndef helper2(x):\n    return G * x\n"
         "@numba.njit\ndef helper1(x):\n    return helper2(x) + 0.0\n"
         "@db.fast_broadcast\ndef k(x):\n    return helper1(x)", namespace)
    _assert_every_mode(namespace["k"], X, np.ones_like(X))
    namespace["G"] = 5.0
    _assert_every_mode(namespace["k"], 5 * X, np.full_like(X, 5.0))


@pytest.mark.parametrize("read", ["m = params\n    return m.SCALE * x",
                                  "return params.A0 + params.A1 + params.SCALE * x"])
def test_a_module_read_through_a_local_alias_or_after_many_names(read):
    params = types.ModuleType("dualbcast_test_alias")
    params.SCALE, params.A0, params.A1 = 2.0, 0.0, 0.0
    namespace = {"params": params, "db": db}
    # (and a kernel naming more than 255 names: EXTENDED_ARG prefixes in its bytecode)
    padding = "".join(f"    v{i} = x\n" for i in range(300))
    exec(f"@db.fast_broadcast\ndef k(x):\n{padding}    {read}", namespace)
    _assert_every_mode(namespace["k"], 2 * X, np.full_like(X, 2.0))
    params.SCALE = 3.0
    _assert_every_mode(namespace["k"], 3 * X, np.full_like(X, 3.0))


@pytest.mark.parametrize("make", [lambda a: (a, 2.0), lambda a: a.view(np.memmap)],
                         ids=["an array in a global tuple", "an ndarray subclass"])
def test_arrays_in_tuples_and_subclass_tables_are_compared_by_contents(make):
    table = np.array([2.0, 3.0])
    namespace = {"db": db, "T": make(table)}
    read = "T[0][0]" if isinstance(namespace["T"], tuple) else "T[0]"
    exec(f"@db.fast_broadcast\ndef k(x):\n    return {read} * x", namespace)
    _assert_every_mode(namespace["k"], 2 * X, np.full_like(X, 2.0))
    table[0] = 7.0
    _assert_every_mode(namespace["k"], 7 * X, np.full_like(X, 7.0))


def _frozen_kernels():
    from numba.extending import register_jitable
    namespace = {"numba": numba, "db": db, "register_jitable": register_jitable, "H": 1.0,
                 "params": types.ModuleType("dualbcast_test_getattr")}
    namespace["params"].SCALE = 1.0
    exec("@register_jitable\ndef rj(x):\n    return H * x\n"
         "@numba.vectorize(['float64(float64)'])\ndef vh(x):\n    return H * x\n"
         "@numba.njit\ndef hd(x, s=1.0):\n    return s * x\n"
         "@db.fast_broadcast\ndef k_rj(x):\n    return rj(x)\n"
         "@db.fast_broadcast\ndef k_vec(x):\n    return vh(x)\n"
         "@db.fast_broadcast\ndef k_default(x):\n    return hd(x)\n"
         "@db.fast_broadcast\ndef k_getattr(x):\n    return getattr(params, 'SCALE') * x\n",
         namespace)
    return namespace


@pytest.mark.parametrize("kernel", ["k_rj", "k_vec", "k_default", "k_getattr"])
def test_a_change_numba_cannot_compile_again_is_an_error_not_a_stale_value(kernel):
    # Numba keeps register_jitable/overload code, vectorize ufuncs, a dispatcher's
    # defaults and getattr(module, "name") compiled for good, once per process.
    namespace = _frozen_kernels()
    k = namespace[kernel]
    np.testing.assert_array_equal(k(X), X)
    if kernel == "k_default":
        namespace["hd"].py_func.__defaults__ = (4.0,)
    elif kernel == "k_getattr":
        namespace["params"].SCALE = 6.0
    else:
        namespace["H"] = 3.0
    with pytest.raises(db.FrozenDependencyChanged, match=f"kernel '{kernel}'.*changed"):
        k(X)
    with pytest.raises(db.FrozenDependencyChanged):
        k.sum_and_partials(X)



def test_the_options_of_a_called_kernel_or_helper_are_in_the_cache_key():
    # a fastmath kernel or helper called compiles to other code: another key (found
    # by a review: the disk cache served code compiled with the other setting)
    import numba

    def body(x):
        return x * 2.0 + 1.0

    def calling(inner):
        @db.fast_broadcast
        def outer(x):
            return inner(x) - 1.0
        return outer

    keys = []
    for inner in (db.fast_broadcast(body), db.fast_broadcast(fastmath=True)(body),
                  numba.njit(body), numba.njit(fastmath=True)(body)):
        outer = calling(inner)
        assert outer(np.ones(3)).tolist() == [2.0, 2.0, 2.0]     # (compiled: keyed)
        keys.append(outer._cache_key)
    assert None not in keys and len(set(keys)) == 4
