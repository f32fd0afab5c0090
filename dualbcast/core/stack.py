"""The traces a thread is recording on: a stack, each trace one level above the trace
below it (1: the outermost).  Where values of several traces meet in one operation,
the innermost (the highest level) processes it, and to it the values of the others are
constants: what keeps nested derivatives apart (no perturbation confusion)."""
import threading

_current = threading.local()       # .tape: the innermost trace of this thread, if any


def current_trace():
    """The innermost trace this thread is recording on, or None."""
    return getattr(_current, "tape", None)


def tracing_state():
    """The thread-local object whose ``tape`` attribute, when set, is the innermost
    trace of this thread (for callers that look it up on every call)."""
    return _current


def enter_trace(trace):
    """Put ``trace`` on this thread's stack, one level above the traces there."""
    outer = getattr(_current, "tape", None)
    trace.level = 1 if outer is None else outer.level + 1
    trace.outer = outer
    _current.tape = trace


def exit_trace(trace):
    """Take ``trace`` off the stack: it is closed (its values may not be used again)."""
    trace.closed = True
    _current.tape = trace.outer
