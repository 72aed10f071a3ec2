"""`python -m onceproof`: the same command as `onceproof`."""
from onceproof.cli import main

if __name__ == "__main__":
    main()
