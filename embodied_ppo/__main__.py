"""`python -m embodied_ppo ...` is the same as the `embodied-ppo` command."""

from embodied_ppo.app.cli import main

if __name__ == "__main__":
    main()
