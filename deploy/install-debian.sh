#!/bin/sh
# install-debian.sh COMMAND PACKAGE: install Debian's PACKAGE when COMMAND is not on PATH.
# `make venv` uses it for Java (PySpark needs a runtime: default-jre-headless) and kcat (the
# Kafka CLI client the tests point at the brokers' Kafka listeners).
set -e
command -v "$1" >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "$2" >/dev/null
