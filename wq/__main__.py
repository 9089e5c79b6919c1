"""Allow `python -m wq`."""

from wq.cli.main import main

if __name__ == "__main__":
    main()
