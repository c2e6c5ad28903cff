#!/usr/bin/env bash
# What the benchmarks need beyond `make install`: Debian's MariaDB JDBC driver (for the Spark JDBC
# baseline) and the mariadb command-line client. Runs apt only for what is missing.
set -euo pipefail
need=()
ls /usr/share/java/mariadb-java-client*.jar >/dev/null 2>&1 || need+=(libmariadb-java)
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing with apt: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || true
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
