"""``python -m minions``: the command line (``apps.cli.main``)."""

if __name__ == "__main__":
    from minions.apps.cli.main import main

    raise SystemExit(main())
