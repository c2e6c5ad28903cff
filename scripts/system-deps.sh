#!/usr/bin/env bash
# Installs what pip cannot: MariaDB and PostgreSQL server binaries (the tests start their own private
# instances, never the system services) and a Java runtime for Spark. Runs apt only for what is missing.
set -euo pipefail
need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server mariadb-client)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing with apt: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
  # Debian starts the packaged services on install; we only need their binaries (a service that ran
  # before this script is left as it was: only what was installed now is stopped)
  case " ${need[*]} " in *" mariadb-server "*) (service mariadb stop || true) >/dev/null 2>&1 ;; esac
  case " ${need[*]} " in *" postgresql "*) (service postgresql stop || true) >/dev/null 2>&1 ;; esac
fi
