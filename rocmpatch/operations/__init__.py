"""The work behind each command, one module per use case: apply, verify, status, unapply, check,
lock, drift and rebase. Each takes loaded series and paths, returns a result or raises a
RocmpatchError; rendering is the commands' business (rocmpatch/commands/)."""
