# Worker image for Dataflow (--sdk_container_image), Flink and Spark (--environment_type DOCKER
# --environment_config IMAGE): Beam's Python SDK image with this package and its dependencies.
# The Beam version and Python minor version must match the launcher's (here 2.77.0, 3.11).
#
#   docker build -f beam_configs/worker.Dockerfile -t pile-pipeline:0.1.0 .
#   docker tag pile-pipeline:0.1.0 123456789012.dkr.ecr.us-east-1.amazonaws.com/pile-pipeline:0.1.0
#   docker push 123456789012.dkr.ecr.us-east-1.amazonaws.com/pile-pipeline:0.1.0
FROM apache/beam_python3.11_sdk:2.77.0

WORKDIR /opt/pile-pipeline
COPY pyproject.toml setup.py ./
COPY pipeline ./pipeline
COPY trainers ./trainers
# The `worker` extra: the Beam job's packages, cloud I/O (s3fs, gcsfs) and the fast backends.
RUN pip install --no-cache-dir ".[worker]"

# Keep Beam's entrypoint: the runner starts the SDK harness through /opt/apache/beam/boot.
ENTRYPOINT ["/opt/apache/beam/boot"]
