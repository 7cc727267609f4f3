"""User-facing errors: anything a user can cause (bad path, bad key, malformed row) raises UserError.

The CLI turns a UserError into one line on stderr and exit code 2; `--debug` shows the traceback.
"""


class UserError(Exception):
    """An error caused by user input; its message is the whole story, one line."""
