#!/bin/sh
# PySpark needs a Java runtime; install Debian's default one when none is present.
set -e
command -v java >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq default-jre-headless >/dev/null
