"""The commands: thin, each its own module, calling library functions; they never import each other."""
