"""The `trainop` command line."""
