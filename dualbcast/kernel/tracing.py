"""Where kernels meet the reverse-mode core.

The kernel layer sits below the core and does not import it.  ``dualbcast.rules.fast``
installs here the box type and the functions that record a kernel call on the tape;
a kernel called with a box among its arguments hands the call to them."""


class TracingHook:
    box_type = None         # dualbcast.core.Box once the rules are installed
    batched_type = None     # a vmap's values (dualbcast.core.batching.Batched)
    takes_lazy_arrays = None    # () -> whether the innermost trace, if any, takes Dask arrays
    call = None             # call(kernel, args): k(*args) on traced values
    sum = None              # sum(kernel, args): k.sum(*args) on traced values


hook = TracingHook()


def traced(args):
    """Whether any argument is a traced value (a box, or a vmap's value)."""
    box_type, batched_type = hook.box_type, hook.batched_type
    for arg in args:
        if type(arg) is box_type or type(arg) is batched_type:
            return True
    return False
