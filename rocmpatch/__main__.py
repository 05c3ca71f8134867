"""`rocmpatch` and `python -m rocmpatch`: Ctrl-C is handled from the first moment (rocmpatch.interrupts),
then the command line is loaded and run."""


def main() -> None:
    from rocmpatch import interrupts
    from rocmpatch.processes import interruption_point

    interrupts.install()
    try:
        interruption_point("started")
        from rocmpatch.cli import main as run_command_line

        run_command_line()
    except KeyboardInterrupt:
        interrupts.interrupted()


if __name__ == "__main__":
    main()
