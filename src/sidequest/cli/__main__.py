"""`python -m sidequest.cli`: the `sidequest` command."""

from . import main

main()
