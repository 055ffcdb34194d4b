"""The training side's ``trep-edge`` subcommands, one module each: ``add_parser(subparsers)`` declares its arguments
and ``run(args)`` does it and returns the exit code. Torch and the training code are imported only inside ``run``,
so ``trep-edge --help`` and ``trep-edge run`` work where the [train] extra is not installed."""
