"""``python -m moesim``: the ``moesim`` command."""

from moesim.cli import main

if __name__ == "__main__":
    main()
