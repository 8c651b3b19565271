# The Spark image of the compose cluster (deploy/docker-compose.spark.yml): the server image
# (deploy/Dockerfile, pykraft:latest) plus Debian's Java and the `analytics` extra (PySpark,
# pyarrow), so a master, its workers and a driver run from PySpark's own jars, as
# `kraft analytics standalone` does on one machine. Built on the server image, not beside it:
# its layers are reused and the brokers and Spark run the same pykraft; the server image stays
# without Java and PySpark.
#
#   deploy/build-wheels.sh spark      # once: PySpark & co in deploy/wheels-spark, installed offline
#   docker build -f deploy/spark.Dockerfile -t pykraft-spark .
ARG KRAFT_IMAGE=pykraft:latest

# The wheels (560 MB, PySpark's jars) are installed in a stage of their own, so that no layer of
# the image keeps them: only the venv they make is copied (the classic builder has no RUN --mount).
FROM ${KRAFT_IMAGE} AS analytics
USER root
COPY deploy/wheels-spark /tmp/wheels
RUN /opt/kraft/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels 'pykraft[analytics]'

FROM ${KRAFT_IMAGE}
USER root
# man1 must exist for openjdk's update-alternatives (the base image drops man pages)
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends default-jre-headless \
 && rm -rf /var/lib/apt/lists/* /usr/share/man/* \
 && mkdir -p /var/lib/spark && chown 1000:1000 /var/lib/spark
COPY --from=analytics /opt/kraft /opt/kraft
# executors run the venv's Python, as the driver does
ENV PYSPARK_PYTHON=/opt/kraft/bin/python
USER 1000:1000
