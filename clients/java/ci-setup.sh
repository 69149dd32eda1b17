#!/usr/bin/env bash
# Installs what the Java client's tests need on a fresh machine: a JDK (17 or newer) and Maven,
# from Debian's packages when missing, then fills ~/.m2 with the pinned plugins and JUnit by
# running the vectors test and an install once. Idempotent; fast when everything is already there.
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# Resolve the build's plugins and test dependencies once (no-op when ~/.m2 has them): the vectors
# test runs (surefire's JUnit provider), and install fetches the sources, javadoc and install plugins.
m2=${HOME}/.m2/repository
if [ ! -d "$m2/org/junit/jupiter/junit-jupiter" ] \
   || [ ! -d "$m2/org/apache/maven/surefire/surefire-junit-platform" ] \
   || [ ! -d "$m2/com/fasterxml/jackson/core/jackson-databind" ] \
   || [ ! -d "$m2/org/apache/maven/plugins/maven-javadoc-plugin" ]; then
  mvn -B -q -ntp install -Dtest=WireVectorsTest -Dsurefire.failIfNoSpecifiedTests=false
fi
