"""Entry point of a rank started by `hw.launch.spawn` (`python -m hw.worker`)."""

from hw.launch import worker_main

if __name__ == "__main__":
    worker_main()
