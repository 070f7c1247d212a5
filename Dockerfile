# One image for Dataflow and other portable runners:
# - the SDK container the workers run (--sdk_container_image): Beam's boot entrypoint;
# - the Flex Template launcher image (gcloud dataflow flex-template build --image): the
#   launcher binary below, and FLEX_TEMPLATE_PYTHON_PY_FILE naming the file it runs.
# The Beam SDK tag must equal the Beam version pinned in setup.py (BEAM_VERSION), and its
# Python (3.11) the launcher's (python311). Pin the launcher by tag or digest for reproducible
# builds: docker build --build-arg LAUNCHER_IMAGE=...python311-template-launcher-base@sha256:...
ARG LAUNCHER_IMAGE=gcr.io/dataflow-templates-base/python311-template-launcher-base:latest
FROM ${LAUNCHER_IMAGE} AS launcher

FROM apache/beam_python3.11_sdk:2.77.0

WORKDIR /opt/tfrecord-etl
COPY setup.py README.md requirements-worker.txt ./
COPY pipeline ./pipeline
COPY transforms ./transforms
COPY configs ./configs
COPY flex_template ./flex_template

# numba keys its cache of compiled kernels by the CPU it compiled for; compiled for the
# architecture's baseline (generic), the cache built below serves whatever CPU model the
# workers run on. Set for the build and for the workers alike.
ENV NUMBA_CPU_NAME=generic

# Pinned worker dependencies, then the package itself; fail the build on any conflict.
# pipeline.job.warm (run outside the source tree, so the installed copy is compiled) runs small
# jobs of every kind, leaving every kernel a job uses compiled in the image: workers start warm.
RUN pip install --no-cache-dir -r requirements-worker.txt \
    && pip install --no-cache-dir --no-deps . \
    && pip check \
    && cd / && python -m pipeline.job.warm

# Flex Template: the launcher runs this file with the template's parameters. The package is
# installed above, so no FLEX_TEMPLATE_PYTHON_SETUP_FILE / _REQUIREMENTS_FILE (faster launch).
COPY --from=launcher /opt/google/dataflow/python_template_launcher /opt/google/dataflow/python_template_launcher
ENV FLEX_TEMPLATE_PYTHON_PY_FILE=/opt/tfrecord-etl/flex_template/main.py

ENTRYPOINT ["/opt/apache/beam/boot"]
