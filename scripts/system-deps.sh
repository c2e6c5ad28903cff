#!/usr/bin/env bash
# Installs what pip cannot: a MariaDB server binary (we start our own private instance, never the
# system service) and a Java runtime for Spark. Runs apt only for what is missing.
set -euo pipefail
need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server mariadb-client)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing with apt: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
  # Debian starts the packaged service on install; we only need its binaries.
  (service mariadb stop || true) >/dev/null 2>&1
fi
