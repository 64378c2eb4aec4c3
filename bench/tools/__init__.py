"""One-off generators of repository files (figures, test reference statistics): ``python -m bench.tools.<name> --help``."""
