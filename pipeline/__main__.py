"""`python -m pipeline convert ...`"""

from pipeline.cli.main import run

if __name__ == "__main__":
    run()
