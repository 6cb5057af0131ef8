"""``python -m rlguard`` runs the command line."""

from rlguard.cli import main

main()
