# SDK container for Dataflow (--sdk_container_image) and other portable runners.
# The base tag must equal the Beam version pinned in setup.py (BEAM_VERSION).
FROM apache/beam_python3.11_sdk:2.77.0

WORKDIR /opt/tfrecord-etl
COPY setup.py README.md requirements-worker.txt ./
COPY pipeline ./pipeline
COPY transforms ./transforms

# Pinned worker dependencies, then the package itself; fail the build on any conflict.
# compile_kernels() (run outside the source tree, so the installed copy is compiled) leaves
# numba's compiled encoder in the image, so workers start warm.
RUN pip install --no-cache-dir -r requirements-worker.txt \
    && pip install --no-cache-dir --no-deps . \
    && pip check \
    && cd / && python -c "from transforms.example_kernel import compile_kernels; compile_kernels()"

ENTRYPOINT ["/opt/apache/beam/boot"]
