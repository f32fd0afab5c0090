"""Every threshold of ``db.jit`` in one place, with the measurement it comes from.

The modules of the jit wing read these at the time of use (``policy.NAME``), so that a
test may set one for the duration of a test.  Timings: 2 cores, Xeon with AVX-512.
"""

# ---------------------------------------------------------------- what a replay checks

# A constant array (a closed-over one, or a non-float argument) above this size that no
# record copies anyway makes the program unreplayable rather than copied and compared
# on every call: comparing 256 KiB costs ~10-15 µs a replay (~50 µs per MiB), about
# what replaying saves on a small program.
COPY_LIMIT = 1 << 18

# Calls of a jitted function that ran eagerly, none replayed, before it warns that
# db.jit is doing nothing for it.
WARN_AFTER = 10

# ---------------------------------------------------------------- generated code

# Runs after which a gradient program is written out as Python code (compiling it
# costs ~150 µs per record) and planned for fusion: jit wants the final form early.
GENERATE_AFTER = 1
# The most records written out as Python code (staged or gradient): Python's compile
# time grows faster than the records' number; longer programs run interpreted.
GENERATE_UP_TO = 2000

# ---------------------------------------------------------------- fused gradient programs

# Short-path runs after which a fusable gradient program is compiled (about a second,
# then cached on disk).
FUSE_AFTER = 1
# The most records fused: the compile grows linearly, ~15 ms a record on top of
# ~0.5 s, so 100 records take about 2 s and stay within MAX_STATEMENTS.
FUSE_UP_TO = 100
# The longest fused function written, in lines of its source (about one statement
# each): the bound on the compile's time and memory, whatever the records (Numba's
# compile cannot be limited in its own process: its size is).  FUSE_UP_TO records of
# the longest kind (scalar leaves folded: 11 lines a record) stay within it; the
# compile's peak RSS grows by ~0.07 MB a line at most, so by less than ~100 MB here,
# in ~2.5 s.
MAX_STATEMENTS = 1200
# Different fused functions one jitted function compiles or shares: Numba keeps what
# it compiles until the process ends (~4 MB a function), and a function whose programs
# keep changing (a Python loop as long as an argument's value) would compile one per
# program.  Past it, its programs replay unfused, as generated Python code.
MAX_FUNCTIONS = 8
# Fused functions the process-wide cache shares between jitted functions (the least
# recently used dropped).
SHARED_FUNCTIONS = 64

# ---------------------------------------------------------------- a staged program's loops

# The fewest elements an elementwise loop is compiled for (about 0.4 s, once, then
# cached on disk): below, the NumPy calls it would replace cost a microsecond or two
# each, and a program replayed a few times would not win its compile back.
LOOP_MIN_ELEMENTS = 2048
# The most records one loop holds: Numba's compile time grows with the loop's length.
LOOP_MAX_RECORDS = 48
# The most kernel calls one loop holds: each compiles into it, ~0.3 s a kernel's
# partials (its dual-number rules' typing), once, then cached on disk.
LOOP_MAX_KERNELS = 4
# Rows shorter than this (x, y, z coordinates) are not looped over one by one: a loop
# over rows of 3 runs at 5 ns an element, a flat one at 0.7 (ElementwiseGroup._mode).
LOOP_SHORT_ROWS = 16
# A loop that hands its records back this many calls in a row (its inputs are not
# finite, or not of the trace's shapes) is not called again.
LOOP_HAND_BACKS = 3
# Different loops compiled in the process (one dispatcher per source, shared by every
# program that has it): Numba keeps what it compiles until the process ends; past it,
# new loops' records run as NumPy calls.
MAX_LOOPS = 256
