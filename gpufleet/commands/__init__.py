"""One module per `gpufleet` subcommand; each exposes `register(subparsers)`."""
