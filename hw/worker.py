"""Entry point of a rank started by `hw.spawn.spawn` (`python -m hw.worker`)."""

from hw.spawn import worker_main

if __name__ == "__main__":
    worker_main()
