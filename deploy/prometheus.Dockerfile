# Prometheus for the compose cluster, from Debian's `prometheus` package (no image is pulled:
# it builds on the same base as deploy/Dockerfile). Only started with the `monitoring`
# profile: docker compose -f deploy/docker-compose.yml --profile monitoring up -d
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man \
 && mkdir -p /prometheus && chown 1000:1000 /prometheus
COPY deploy/prometheus.yml /etc/prometheus/prometheus.yml
USER 1000:1000
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus", "--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"]
