"""The root of every error sbpc raises for its user to handle.

`except sembp_dsl.SbpcError` catches them all: a pipeline that does not compile, a model that cannot be
called, a data set, cache, run record or file that is not what it should be. Anything else that escapes
is a bug in sbpc, which is why the command line prints a message for an SbpcError and a traceback for
the rest. This module imports nothing of sbpc, so every layer can derive its errors from it.
"""


class SbpcError(Exception):
    """An error that is the user's to fix (or to wait out); its message says what happened and what to do."""


#: How a failure that is no SbpcError is named where it is reported (the command line, a run record).
BUG_IN_SBPC = "this is a bug in sbpc"
