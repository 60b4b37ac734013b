"""`python -m deltarl ...` runs the `deltarl` command."""

from deltarl import main

main()
