"""Packaging for zkcoord. Versions are pinned where an API is young or where we
depend on library internals (protocol classes, construct's declarations)."""

from setuptools import Extension, find_packages, setup

# The compiled record-batch decoder (zkcoord/fetch/_recordbatch.c). Optional:
# where no C compiler is found, zkcoord.fetch.records falls back to its
# pure-Python decoder, which returns the same columns, slower.
RECORD_DECODER = Extension("zkcoord.fetch._recordbatch", ["zkcoord/fetch/_recordbatch.c"],
                           extra_compile_args=["-O2", "-std=c11", "-Wall", "-Werror=implicit-function-declaration"],
                           optional=True)

# SASL GSSAPI (Kerberos) to ZooKeeper: pure-sasl's binding of MIT Kerberos,
# built against its headers (Debian: libkrb5-dev).
KERBEROS = ["kerberos>=1.3.1"]

setup(
    name="zkcoord",
    version="0.1.0",
    description="A ZooKeeper-elected, server-pushed consumer-group coordinator",
    python_requires=">=3.11",
    packages=find_packages(include=["zkcoord", "zkcoord.*"]),
    # The Spark source's Java sources, compiled after install (python -m zkcoord.spark.jvm).
    package_data={"zkcoord.spark.jvm": ["src/zkcoord/spark/*.java", "src/META-INF/services/*"],
                  "zkcoord.console": ["templates/*.html", "static/*"]},
    ext_modules=[RECORD_DECODER],
    install_requires=[
        "kazoo==2.11.0",
        # kazoo's SASL to ZooKeeper (DIGEST-MD5, GSSAPI) goes through pure-sasl.
        "pure-sasl>=0.6.2",
        "gevent>=24.2",
        "construct==2.10.70",
        "kafka-python==3.0.12",
        "confluent-kafka==2.16.1",
        "crc32c>=2.4",
        # The codecs of compressed record batches, through kafka-python's kafka.codec.
        "python-snappy>=0.7",
        "lz4>=4",
        "zstandard>=0.22",
        # The metrics endpoint (zkcoord/metrics/): still 0.x, its API settled within it.
        "prometheus-client>=0.20,<1",
        # LZ4 in the magic-0 message format (pre-0.10 clients) has a header
        # checksum of its own that kafka.codec recomputes with xxhash.
        "xxhash>=3",
        # TLS certificates for tests, the demo and zkcoord zk up --tls (zkcoord/security/certs.py).
        "cryptography>=42",
        # Subscription patterns matched in linear time (zkcoord/patterns.py).
        "google-re2>=1.1",
        # The web console (zkcoord/console/), served by gevent's WSGI server.
        "flask>=3.0,<4",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "hypothesis>=6.100",
            # Stock Kafka clients as group members (tests/e2e/test_stock_clients.py).
            "aiokafka==0.14.*",
            *KERBEROS,  # tests/e2e/test_zookeeper_kerberos.py
            # The console's browser tests drive Debian's chromium (scripts/install.sh), never
            # a browser Playwright downloads; its API changes between minor releases.
            "playwright>=1.45,<1.66",
        ],
        "kerberos": KERBEROS,
        # Apache Kafka for the harness: jars from Maven Central, which
        # scripts/install.sh fetches (zkcoord.testing.kafka_jars); nothing from PyPI.
        "kafka": [],
        "spark": [
            "pyspark>=4.2",
            "pyarrow>=19",  # pyarrow.concat_batches (Consumer.poll_batch)
        ],
    },
    entry_points={"console_scripts": ["zkcoord = zkcoord.cli:main"]},
)
