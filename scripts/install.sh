#!/usr/bin/env bash
# Install what zkcoord needs on a Debian machine: Apache ZooKeeper and a JRE,
# kcat (the tests produce and consume with it), iproute2 and iptables (the
# drill partitions consumers in network namespaces), a C compiler and Python's
# headers (pip builds the compiled record decoder, zkcoord/fetch/_recordbatch.c),
# and the project itself with its Python dependencies; with the "spark" extra,
# a JDK too, to build the Spark source's JVM reader (zkcoord/spark/jvm), and
# Maven, to fetch Spark's own Kafka source from Maven Central into the user's
# cache (the Spark benchmark and a test read with it beside ours); with
# "kerberos" (or "test"), MIT Kerberos's headers, to build the binding SASL
# GSSAPI to ZooKeeper uses; with "test", a KDC and kinit, which the Kerberos
# tests run, and Chromium, which the console's browser tests drive; with
# "kafka" (or "test"), Maven, and through it Apache Kafka's releases from
# Maven Central (kafka/pom.xml) into ~/.cache/zkcoord/kafka, for the harness
# that starts real Kafka brokers (zkcoord/testing/kafka.py); with "test", a JDK
# too, to build the Java member driver (java/member-driver/: Kafka's own
# KafkaConsumer as group members) against those jars, and Node.js with npm,
# to install KafkaJS as pinned by node/kafkajs-driver/package-lock.json into
# ~/.cache/zkcoord/kafkajs (zkcoord/testing/kafkajs.py: KafkaJS as members).
# Safe to run again: it installs only what is missing.
# Usage: scripts/install.sh [EXTRAS]   (EXTRAS for pip, e.g. "test" or "test,spark")
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-}"
debs=(zookeeper default-jre-headless kcat iproute2 iptables gcc libc6-dev python3-dev)
case ",$extras," in *,spark,*|*,test,*) debs+=(default-jdk-headless) ;; esac
case ",$extras," in *,kerberos,*|*,test,*) debs+=(libkrb5-dev) ;; esac
case ",$extras," in *,test,*) debs+=(krb5-kdc krb5-admin-server krb5-user chromium) ;; esac
case ",$extras," in *,spark,*|*,kafka,*|*,test,*) debs+=(maven) ;; esac
# Node.js and npm by their commands: a Node.js from elsewhere (NodeSource's
# nodejs package carries its own npm) serves as well as Debian's.
case ",$extras," in *,test,*) command -v node >/dev/null || debs+=(nodejs)
                           command -v npm >/dev/null || debs+=(npm) ;; esac
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

missing=()
for pkg in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check -e ".${extras:+[$extras]}"
case ",$extras," in *,spark,*) python3 -m zkcoord.spark.jvm >/dev/null
                             python3 -m zkcoord.testing.spark_kafka >/dev/null ;; esac
case ",$extras," in *,kafka,*|*,test,*) python3 -m zkcoord.testing.kafka_jars ;; esac
case ",$extras," in *,test,*) python3 -m zkcoord.testing.java_members >/dev/null
                           python3 -m zkcoord.testing.kafkajs ;; esac
