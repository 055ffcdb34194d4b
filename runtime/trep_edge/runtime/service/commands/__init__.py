"""The runtime's ``trep-edge`` subcommands, one module each: ``add_parser(subparsers)`` declares its arguments and
``run(args)`` does it and returns the exit code (user errors raise ValueError / FileNotFoundError, which the CLI
prints as one line). Each imports what it runs only inside ``run``, so listing them all (``--help``) stays cheap
and ``trep-edge run`` never loads the training side."""
