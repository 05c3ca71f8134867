"""One module per command; each `run(...)` takes paths and values and returns an ExitCode."""
