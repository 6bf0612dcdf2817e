"""The ``legato`` command line: one module per command."""
