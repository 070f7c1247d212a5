"""Flex Template entry point (FLEX_TEMPLATE_PYTHON_PY_FILE in the Dockerfile).

The launcher runs this file with the template's parameters as `--name=value` flags. It builds
and submits the job like `tfrecord-etl convert --runner=DataflowRunner`, then exits without
waiting: the Dataflow service runs the job, and a launcher that waited would hold the launch.
"""

import sys

from pipeline.cli.main import main


def _argv(args: list[str]) -> list[str]:
    given = any(a == "--runner" or a.startswith("--runner=") for a in args)
    runner = [] if given else ["--runner=DataflowRunner"]
    return ["convert", "--no_wait_until_finish", *runner, *args]


if __name__ == "__main__":
    sys.exit(main(_argv(sys.argv[1:])))
