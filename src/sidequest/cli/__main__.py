"""`python -m sidequest.cli`: the `sidequest` command."""

from sidequest.cli import main

main()
