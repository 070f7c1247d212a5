"""Install the tfrecord-etl job. Dataflow workers install the same package (--setup_file)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(
    r'__version__ = "([^"]+)"',
    Path(__file__).with_name("pipeline").joinpath("__init__.py").read_text(),
).group(1)

# Pinned: Dataflow workers and the SDK container (Dockerfile) run the same Beam as the launcher.
BEAM_VERSION = "2.77.0"

setup(
    name="tfrecord-etl",
    version=VERSION,
    description="Parquet/CSV -> sharded, compressed tf.train.Example TFRecords on Apache Beam",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["pipeline", "pipeline.*", "transforms", "transforms.*"]),
    install_requires=[
        f"apache-beam[tfrecord,gcp,aws]=={BEAM_VERSION}",  # aws: s3:// (boto3)
        "google-crc32c>=1.5",
        "isal>=1.6",
        "llvmlite>=0.43",  # imported directly by the kernel (numba pins the matching one)
        "matplotlib>=3.8",  # the report's plots (tfrecord-etl report)
        "numba>=0.60",
        "numpy>=1.26",
        # files: image columns: decoded, checked, resized and re-encoded (matplotlib needs it too)
        "pillow>=10",
        "protobuf>=4.25",  # imported directly: tf.train.Example's classes (inspect, verify)
        "pyarrow>=14",
        "pyyaml>=6",
        # files: audio columns: the header of WAV, FLAC, OGG, MP3... (libsndfile, in its wheel)
        "soundfile>=0.12",
        # the statistics and schema files (TF Metadata protos) the job writes
        "tensorflow-metadata==1.21.0",
    ],
    extras_require={
        # The reader side (pipeline.reader) needs TensorFlow; the conversion job does not.
        "tf": ["tensorflow-cpu>=2.15"],
        # PyTorch datasets over an output (pipeline/reader/torch.py); the numpy reader
        # (pipeline/reader/arrays.py) and random access (pipeline/reader/index.py) need neither.
        "torch": ["torch>=2.1"],
        # grain's RandomAccessDataSource over an indexed output (docs/reader.md)
        "grain": ["grain>=0.2"],
        # azfs:// (Azure Blob Storage): Beam's Azure filesystem and azure-storage-blob
        # (transforms/fs_azure.py); pinned for the workers in requirements-worker.txt
        "azure": [f"apache-beam[azure]=={BEAM_VERSION}"],
        # Dask: the cluster engine the distributed tests run on
        # (pipeline/engines/beam/dask_runner.py).
        "dask": [f"apache-beam[dask]=={BEAM_VERSION}", "dask==2026.8.0", "distributed==2026.8.0"],
        "test": [
            "tensorflow-cpu>=2.15",
            "pytest>=8",
            # the suite on the machine's cores, a test file per worker (pyproject.toml)
            "pytest-xdist>=3.6",
            "hypothesis>=6",
            "ruff>=0.5",
            # a real local cluster and a GCS emulator, started by the tests on 127.0.0.1
            f"apache-beam[dask]=={BEAM_VERSION}",
            "dask==2026.8.0",
            "distributed==2026.8.0",
            "gcp-storage-emulator==2026.7.19",
            # an S3 emulator (moto's server), started by tests/test_s3.py on 127.0.0.1
            "moto[server]==5.2.5",
            # azfs:// for tests/test_azure.py (its emulator, azurite, comes from npm: .ci/run)
            f"apache-beam[azure]=={BEAM_VERSION}",
            # reads the tfds layout back through tfds.builder_from_directory (tests/test_layouts.py)
            "tensorflow-datasets==4.9.10",
            # a grain data source over an indexed output (tests/test_reader_index.py); PyTorch's
            # tests run where torch is installed (.ci/run installs the CPU build)
            "grain==0.2.18",
            # Ray Data reading an output with its schema.pbtxt (tests/test_ray_read.py);
            # pandas pinned below 2.4, the bound Beam's own extras keep
            "ray[data]==2.60.0",
            "pandas==2.3.3",
        ],
    },
    entry_points={"console_scripts": ["tfrecord-etl=pipeline.cli.main:run"]},
)
