import sys

from explorer.cli import main

if __name__ == "__main__":  # not when a spawned process (the lab's ranks) imports it again
    sys.exit(main(prog="python -m explorer"))
