"""Kernel calls an elementwise loop (:mod:`.elementwise`) computes per element: a
kernel's map ``k(x, a)`` or partials loop (``value_and_partials``, what ``k(x, a)``
on traced values runs) inside the loop of the operations around it -- a bias added
before it, the products of its partials after -- instead of a pass over memory each.

Per element the loop calls the kernel's scalar function as the kernel's own loop calls
it (:func:`dualbcast.kernel.loops`): its operands as float64, each differentiated one a
dual number seeded with a unit partial, the value and the partials read off the
result -- the same operations, so the same bits (a kernel's math is dualbcast's own,
branch-free, without ``fastmath``: a fastmath kernel stays its own loop).  A kernel
raises as it does in its own loop; the replay then meets the error and traces again.

The kernel is bound as the trace ran it: its scalar function, the values of the names
it reads, and its cache key, of one generation.  The loop's source names that key (or,
for a kernel not cached on disk, the scalar function, which the loop keeps alive), and
every run first checks that the names still have those values: when one changed, the
kernel's own loop (compiled afresh) runs instead.
"""

# (the names the calls use; a loop's cached code inlines them: its directory is
# named by the library's fingerprint, kernel.cache.library_directory)
KERNELS_HEADER = ("from numba import float64 as _f\n"
                  "from dualbcast.dual import make_dual as _dual, partials_of as _partials, "
                  "value_of as _value\n\n")


class KernelCall:
    """Kernel loop ``call`` (a :class:`~dualbcast.rules.fast_nested.KernelLoop`, map or
    partials), the ``number``-th of its group, whose record's slot is ``out``: its
    value per element is ``v<out>`` (map) or its outputs ``v<out>_<j>`` (the value,
    then the partials: partials)."""

    __slots__ = ("number", "out", "loop", "active", "scalar", "dependencies", "cache_key")

    def __init__(self, call, number, out):
        self.number, self.out, self.loop = number, out, call.loop
        self.active = call.prepared.loop.spec.active if call.loop == "partials" else ()
        kernel = call.kernel
        self.scalar, self.dependencies, self.cache_key = \
            kernel._scalar_kernel, kernel._dependencies, kernel._cache_key

    def current(self):
        """Whether the names the kernel reads still have the values it was bound with."""
        return self.dependencies.unchanged()

    @property
    def name(self):
        """The name the loop's module binds the kernel's scalar function to."""
        return f"_k{self.number}"

    def key(self):
        """The source's line naming the compiled kernel: its cache key (a digest of
        its code and what it reads), or, for a kernel not cached on disk, its scalar
        function's identity (kept alive by the loop; the loop is then not cached
        either)."""
        key = self.cache_key
        return f"# {self.name}: {key if key is not None else f'id {id(self.scalar)}'}\n"

    def head(self):
        """Before the loop: the unit seeds of the differentiated operands."""
        n = len(self.active)
        return [f"    sd{self.number}_{j} = ("
                + ", ".join("1.0" if m == j else "0.0" for m in range(n)) + ",)"
                for j in range(n)]

    def element(self, operands):
        """Per element, on ``operands`` (each operand's name in the loop)."""
        k = self.number
        args = [f"_dual({op}, sd{k}_{self.active.index(i)})" if i in self.active else op
                for i, op in enumerate(operands)]
        lines = [f"kr{k} = {self.name}({', '.join(args)})"]
        if self.loop == "map":
            return lines + [f"v{self.out} = _f(_value(kr{k}))"]
        lines += [f"v{self.out}_0 = _f(_value(kr{k}))", f"kp{k} = _partials(kr{k}, sd{k}_0)"]
        return lines + [f"v{self.out}_{1 + j} = kp{k}[{j}]" for j in range(len(self.active))]
