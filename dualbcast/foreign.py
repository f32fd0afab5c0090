"""Arrays of other libraries, recognised without importing them (they are optional)."""


def is_dask_array(value) -> bool:
    """Whether ``value`` is a Dask array (known by its type's module: Dask itself is
    imported only by the adapter, dualbcast.dask)."""
    return type(value).__module__.startswith("dask.array")


def frozen_dask_array(value):
    """The Dask array ``value`` as it is now, in an object of its own: Dask's ``x[i] = v``
    rebinds the object's graph in place, which a pullback holding ``x`` would then see."""
    return type(value)(value.dask, value.name, value.chunks, meta=value)
