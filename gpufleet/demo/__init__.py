"""Demo-only files: what `make demo` and `gpufleet demo` need and a production run never loads."""
