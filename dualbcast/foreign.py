"""Arrays of other libraries, recognised without importing them (they are optional)."""


def is_dask_array(value) -> bool:
    """Whether ``value`` is a Dask array (known by its type's module: Dask itself is
    imported only by the adapter, dualbcast.dask)."""
    return type(value).__module__.startswith("dask.array")
