"""One module per CLI verb; each exposes ``register(subparsers)``.

A verb's parser sets ``func=run`` where ``run(args) -> int`` returns the exit code.
"""
